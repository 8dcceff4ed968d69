#include "engine/controller.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>

#include "engine/fusion.h"
#include "algorithms/reduce.h"
#include "algorithms/ring_allreduce.h"
#include "observability/timeline.h"
#include "transport/peer_channel.h"
#include "engine/validate.h"

namespace hvdlite {
namespace {

constexpr uint64_t kNoNewRequests = 1;  // AND = 0 when any rank needs the coordinator
constexpr uint64_t kNoShutdown = 2;     // AND = 0 when any rank is shutting down
constexpr uint64_t kJoined = 4;         // AND = 1 when every rank has joined
constexpr uint64_t kNoTracing = 8;      // AND = 0 when some rank's timeline is on
constexpr uint64_t kNoFailure = 64;     // AND = 0 when a rank stops because something failed (16, 32: deadlock.h)

void set_bit(uint64_t* words, size_t i) { words[i / 64] |= uint64_t(1) << (i % 64); }
void clear_bit(uint64_t* words, size_t i) { words[i / 64] &= ~(uint64_t(1) << (i % 64)); }
bool bit(const uint64_t* words, size_t i) { return (words[i / 64] >> (i % 64)) & 1; }

// Merged rounds: the packet is [header][control words][room for data].
//   header[0]  number of control words (the same on both ranks)
//   header[1]  what the data is: elements | dtype << 48 | op << 56, or 0 for none
//   header[2]  bytes of data the rank wanted to send (merged: the larger), sizing the next
//              round's room
constexpr size_t kHeaderWords = 3;
// Data up to this size rides in the round; larger all-reduces are bandwidth-bound anyway.
constexpr size_t kMergedDataBytes = 16 * 1024;

uint64_t describe_data(size_t count, DataType dtype, ReduceOp op) {
  return static_cast<uint64_t>(count) | static_cast<uint64_t>(dtype) << 48 |
         static_cast<uint64_t>(op) << 56;
}

// The merge (see controller.h). Data is reduced only if both sides hold the same control
// words and the same kind of data; `lower` is rank 0's packet, the result goes to `inout`.
// `left`: the controller's scratch, reused round after round (no allocation, no thread-local).
void merge_round(const uint64_t* lower, uint64_t* inout, size_t count, std::vector<uint8_t>& left) {
  const size_t ncontrol = static_cast<size_t>(inout[0]);
  const uint64_t* lc = lower + kHeaderWords;
  uint64_t* hc = inout + kHeaderWords;
  const uint64_t what = inout[1];
  // The deadlock detector's bits may differ (one rank waits, the other not yet): the data
  // is still the same all-reduce.
  const bool reduce = what != 0 && lower[1] == what && ncontrol + kHeaderWords <= count &&
                      ncontrol > 0 &&
                      (lc[0] & ~DeadlockDetector::kBits) == (hc[0] & ~DeadlockDetector::kBits) &&
                      std::equal(lc + 1, lc + ncontrol, hc + 1);
  for (size_t i = 0; i < ncontrol; ++i) hc[i] &= lc[i];
  inout[2] = std::max(inout[2], lower[2]);
  if (!reduce) {
    inout[1] = 0;
    return;
  }
  const size_t elements = static_cast<size_t>(what & ((uint64_t(1) << 48) - 1));
  const DataType dtype = static_cast<DataType>((what >> 48) & 0xff);
  const ReduceOp op = static_cast<ReduceOp>(what >> 56);
  const size_t bytes = elements * dtype_size(dtype);
  if (bytes > (count - kHeaderWords - ncontrol) * sizeof(uint64_t)) {
    inout[1] = 0;
    return;
  }
  // lower (op) higher, into the higher's buffer: reduce_into computes dst = dst (op) src.
  left.resize(bytes);
  std::memcpy(left.data(), lc + ncontrol, bytes);
  reduce_into(left.data(), hc + ncontrol, elements, dtype, op);
  std::memcpy(hc + ncontrol, left.data(), bytes);
}

// The merge of a gathered round (more than 2 ranks, controller.h): every rank reads the same
// packets, so every rank decides and computes alike. The control words are ANDed; the data
// is reduced only if every packet holds the same kind of data and the same first `compare`
// control words (the round's decision: flags but the deadlock detector's, ready, valid,
// staying; autotune's and the timeline's words may differ). Each element is reduced as the
// ring reduces it (ring_allreduce.h): the owner g of its segment of even_segments folds
// x[g+1] into x[g+2], that into x[g+3], ..., and the result into x[g] (dst = own (op)
// received). The result goes to `out` (kHeaderWords + ncontrol words in); false: no data.
bool merge_gathered(const std::vector<const uint64_t*>& packets, size_t count, size_t compare,
                    uint64_t* out, std::vector<uint8_t>& acc, std::vector<uint8_t>& next) {
  const int n = static_cast<int>(packets.size());
  const size_t ncontrol = static_cast<size_t>(packets[0][0]);
  const uint64_t what = packets[0][1];
  bool reduce = what != 0 && ncontrol > 0 && compare <= ncontrol && kHeaderWords + ncontrol <= count;
  uint64_t wanted = 0;
  for (int r = 0; r < n; ++r) {
    const uint64_t* p = packets[r];
    wanted = std::max(wanted, p[2]);
    reduce = reduce && p[1] == what &&
             (p[kHeaderWords] & ~DeadlockDetector::kBits) == (packets[0][kHeaderWords] & ~DeadlockDetector::kBits) &&
             std::equal(p + kHeaderWords + 1, p + kHeaderWords + compare, packets[0] + kHeaderWords + 1);
  }
  out[0] = ncontrol;
  out[2] = wanted;
  for (size_t i = 0; i < ncontrol; ++i) {
    uint64_t w = ~uint64_t(0);
    for (int r = 0; r < n; ++r) w &= packets[r][kHeaderWords + i];
    out[kHeaderWords + i] = w;
  }
  out[1] = 0;
  if (!reduce) return false;
  const size_t elements = static_cast<size_t>(what & ((uint64_t(1) << 48) - 1));
  const DataType dtype = static_cast<DataType>((what >> 48) & 0xff);
  const ReduceOp op = static_cast<ReduceOp>(what >> 56);
  const size_t es = dtype_size(dtype);
  if (elements * es > (count - kHeaderWords - ncontrol) * sizeof(uint64_t)) return false;
  out[1] = what;
  char* result = reinterpret_cast<char*>(out + kHeaderWords + ncontrol);
  auto data = [&](int r) { return reinterpret_cast<const char*>(packets[r] + kHeaderWords + ncontrol); };
  const Segments segs = even_segments(elements, n);
  for (int g = 0; g < n; ++g) {
    const size_t c = segs.count[g], at = segs.offset[g] * es, bytes = c * es;
    if (c == 0) continue;
    acc.assign(data((g + 1) % n) + at, data((g + 1) % n) + at + bytes);
    for (int k = 2; k < n; ++k) {
      const char* theirs = data((g + k) % n) + at;
      next.assign(theirs, theirs + bytes);
      reduce_into(next.data(), acc.data(), c, dtype, op);
      acc.swap(next);
    }
    std::memcpy(result + at, data(g) + at, bytes);
    reduce_into(result + at, acc.data(), c, dtype, op);
  }
  return true;
}

}  // namespace

Controller::Controller(Transport& transport, Config& config, const Membership& members)
    : transport_(transport), config_(config), members_(members), cache_(config.cache_capacity),
      stall_(transport, config, members), autotune_(config, transport.rank()),
      deadlock_(config.deadlock_s) {}

void Controller::watch_cross_set_deadlocks(RankActivity& activity, CrossSetDeadlock::Describe describe,
                                           CrossSetDeadlock::Stop stop) {
  cross_set_ = std::make_unique<CrossSetDeadlock>(transport_, config_.deadlock_s, activity,
                                                  std::move(describe), std::move(stop));
}

std::chrono::milliseconds Controller::stall_poll_interval() const {
  return cross_set_ ? std::min(stall_.poll_interval(), cross_set_->poll_interval()) : stall_.poll_interval();
}

void Controller::check_stalls(const EntryList& pending) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_side_poll_ >= stall_poll_interval()) {
    last_side_poll_ = now;
    std::vector<uint8_t> bytes;
    int from = 0;
    while (transport_.poll_side(bytes, from)) {
      if (cross_set_ && CrossSetDeadlock::owns(bytes)) cross_set_->on_message(bytes, from);
      else stall_.on_message(bytes, from, pending);
    }
    if (cross_set_) cross_set_->poll();
  }
  stall_.check(pending);
}

void Controller::check_settings_agree() {
  const std::pair<const char*, uint64_t> settings[] = {
      {"HVDLITE_CACHE_CAPACITY", config_.cache_capacity},
      {"HVDLITE_FUSION_THRESHOLD", config_.fusion_threshold},
      {"HVDLITE_RING_PIECE_BYTES", config_.ring_piece_bytes},
      {"HVDLITE_EXCHANGE_MAX_BYTES", config_.exchange_max_bytes},
      {"HVDLITE_SHM_ALLREDUCE_MIN_BYTES", config_.shm_allreduce_min_bytes},
      {"HVDLITE_PIPELINE_PIECE_BYTES", config_.pipeline_piece_bytes},
      {"HVDLITE_BOARD_ALLREDUCE_MAX_BYTES", config_.board_allreduce_max_bytes},
      {"HVDLITE_SHM_COLLECTIVES", static_cast<uint64_t>(config_.shm_collectives)},
      {"HVDLITE_HIERARCHICAL_ALLREDUCE", static_cast<uint64_t>(config_.hierarchical_allreduce)},
      {"HVDLITE_TEST_MAX_TRANSFER_BYTES", config_.max_transfer_bytes},
      {"HVDLITE_AUTOTUNE", config_.autotune},
  };
  // AND of each value and of its complement: both survive unchanged only if all ranks agree.
  std::vector<uint64_t> words;
  for (const auto& s : settings) {
    words.push_back(s.second);
    words.push_back(~s.second);
  }
  transport_.start_control_and(words.data(), words.size());
  while (!transport_.test_control()) std::this_thread::yield();
  for (size_t i = 0; i < std::size(settings); ++i) {
    if (words[2 * i] != settings[i].second || words[2 * i + 1] != ~settings[i].second) {
      throw Error(Status::InvalidArgument,
                  std::string(settings[i].first) + " differs across ranks (this rank: " +
                  std::to_string(settings[i].second) + "); every rank must use the same value "
                  "(hvdlite-run forwards HVDLITE_* settings to all ranks)");
    }
  }
}

std::optional<RoundOutcome> Controller::negotiate(EntryList& pending, bool shutdown_requested,
                                                  const RoundOptions& options) {
  if (!open_) begin_round(pending, shutdown_requested, options.blocked, options.failed);
  if (!solo_ && !wait_for_round(pending, options.patient, options.leave_at)) return std::nullopt;
  open_ = false;
  return end_round(pending);
}

Controller::DeadlockVerdict Controller::agree_on_deadlock(const RankWaits& mine) {
  std::vector<std::vector<uint8_t>> all = transport_.gather_control(encode_waits(mine));
  // Rank 0 decides: one byte per member (1: its waits fail), then the message.
  std::vector<uint8_t> verdict;
  if (transport_.rank() == 0) {
    std::vector<RankWaits> by_member;
    for (const auto& b : all) by_member.push_back(decode_waits(b));
    const std::vector<bool> behind = fell_behind(by_member);
    const bool anyone_behind = std::find(behind.begin(), behind.end(), true) != behind.end();
    for (size_t m = 0; m < by_member.size(); ++m) verdict.push_back(!anyone_behind || behind[m] ? 1 : 0);
    const std::string message = describe_deadlock(by_member, members_, config_.deadlock_s, behind);
    verdict.insert(verdict.end(), message.begin(), message.end());
  }
  transport_.broadcast_control(verdict);
  const size_t n = static_cast<size_t>(transport_.size());
  DeadlockVerdict out;
  out.message.assign(verdict.begin() + static_cast<std::ptrdiff_t>(n), verdict.end());
  out.fail_mine = verdict[static_cast<size_t>(transport_.rank())] != 0;
  out.everyone = std::all_of(verdict.begin(), verdict.begin() + static_cast<std::ptrdiff_t>(n),
                             [](uint8_t b) { return b != 0; });
  return out;
}

void Controller::begin_round(EntryList& pending, bool shutdown_requested, bool blocked, bool failed) {
  open_ = true;
  const size_t span = span_ = cache_.span();
  const size_t nwords = nwords_ = (span + 63) / 64;
  const size_t rank_words = rank_words_ = (static_cast<size_t>(transport_.size()) + 63) / 64;
  const size_t tuning_words = tuning_words_ = autotune_.enabled() ? Autotune::kWords : 0;
  const size_t late_words = late_.active() ? late_.words(nwords, rank_words) : 0;
  std::vector<uint64_t>& words = words_;  // reused: no allocation per round
  words.assign(1 + 2 * nwords + rank_words + tuning_words + late_words, 0);
  uint64_t* ready = words.data() + 1;
  uint64_t* valid = ready + nwords;
  uint64_t* staying = valid + nwords;
  uint64_t* tuning = staying + rank_words;  // rank 0's autotune choice travels here
  uint64_t* late = tuning + tuning_words;
  for (size_t i = 0; i < nwords + rank_words; ++i) valid[i] = ~uint64_t(0);
  if (shutdown_requested) clear_bit(staying, static_cast<size_t>(transport_.rank()));

  bool need_coordinator = false, joined = false;
  for (auto& e : pending) {
    if (e->state == TensorEntry::State::New) {
      e->state = TensorEntry::State::Unannounced;
      if (e->request.op == OpType::Join) e->request.join_round = round_;
      int slot = ResponseCache::cacheable(e->request.op) ? cache_.find(e->request.name) : -1;
      if (slot >= 0) {
        if (cache_.at(slot).matches(e->request)) {
          e->state = TensorEntry::State::CacheHit;
          e->cache_id = slot;
        } else {
          clear_bit(valid, slot);  // every rank drops the stale response this round
        }
      }
    }
    if (e->request.op == OpType::Join) joined = true;
    if (e->state == TensorEntry::State::CacheHit) set_bit(ready, e->cache_id);
    if (e->state == TensorEntry::State::Unannounced) need_coordinator = true;
  }
  if (joined) {
    // A joined rank stands in (with zeros) for every cached all-reduce.
    for (size_t s = 0; s < span; ++s) {
      if (cache_.occupied(static_cast<int>(s)) && cache_.at(static_cast<int>(s)).op == OpType::Allreduce) set_bit(ready, s);
    }
    words[0] |= kJoined;
  }
  if (!need_coordinator) words[0] |= kNoNewRequests;
  if (!shutdown_requested) words[0] |= kNoShutdown;
  if (!failed) words[0] |= kNoFailure;
  Timeline& timeline = Timeline::get();
  if (!timeline.active()) words[0] |= kNoTracing;
  words[0] |= deadlock_.flags(blocked);

  if (autotune_.enabled()) autotune_.contribute(tuning);
  if (late_.active()) late_.contribute(late, ready, nwords, transport_.rank(), rank_words);
  start_round(words, pending, !need_coordinator && !joined && !shutdown_requested);
}

RoundOutcome Controller::end_round(EntryList& pending) {
  const size_t span = span_, nwords = nwords_, rank_words = rank_words_;
  std::vector<uint64_t>& words = words_;
  uint64_t* ready = words.data() + 1;
  uint64_t* valid = ready + nwords;
  uint64_t* staying = valid + nwords;
  uint64_t* tuning = staying + rank_words;
  uint64_t* late = tuning + tuning_words_;
  Timeline& timeline = Timeline::get();
  const bool prereduced = finish_round(words);
  if (autotune_.enabled()) autotune_.apply(tuning);
  if (late_.active() || !(words[0] & kNoTracing)) {
    auto late_by_name = late_.observe(late, ready, valid, span, nwords, transport_.size(), rank_words,
                                      cache_, members_, !(words[0] & kNoTracing));
    for (auto& [name, ranks] : late_by_name) {
      // Only for tensors this rank will trace (a joined rank stands in without an entry).
      for (const auto& e : pending) {
        if (e->request.name == name) {
          timeline.note_late_ranks(name, std::move(ranks));
          break;
        }
      }
    }
  }

  RoundOutcome out;
  out.shutdown = !(words[0] & kNoShutdown);
  out.failure = !(words[0] & kNoFailure);
  for (int r = 0; out.shutdown && r < transport_.size(); ++r) {
    if (!bit(staying, static_cast<size_t>(r))) out.shutdown_ranks.push_back(r);
  }
  const bool all_joined = words[0] & kJoined;
  for (size_t s = 0; s < span; ++s) {
    if (!bit(valid, s)) {
      for (auto& e : pending) {
        if (e->state == TensorEntry::State::CacheHit && e->cache_id == static_cast<int>(s)) {
          e->state = TensorEntry::State::Unannounced;
          e->cache_id = -1;
        }
      }
      cache_.evict(static_cast<int>(s));
    } else if (bit(ready, s) && !all_joined && !prereduced && cache_.occupied(static_cast<int>(s))) {
      out.responses.push_back(cache_.at(static_cast<int>(s)));  // a merged round ran them already
    }
  }
  if (!(words[0] & kNoNewRequests)) {
    std::vector<Response> decided = ask_coordinator(pending);
    for (const Response& r : decided) {
      if (r.ok() && ResponseCache::cacheable(r.op)) cache_.insert(r);
    }
    out.responses.insert(out.responses.end(), decided.begin(), decided.end());
  }
  if (prereduced) {
    out.prereduced = &packed_;
    out.reduced = packet_.data() + kHeaderWords + words.size();
  }
  autotune_.observe(out.responses);
  out.deadlock = deadlock_.observe(words[0], !out.responses.empty() || prereduced);
  ++round_;
  return out;
}

void Controller::start_round(std::vector<uint64_t>& words, const EntryList& pending, bool eligible) {
  merged_ = transport_.size() == 2 && !autotune_.enabled();  // Autotune's words are not merged
  solo_ = transport_.size() == 1 && !autotune_.enabled();    // Note [solo rounds] in controller.h
  // Past 8 ranks no round gathers: every rank reading every rank's packet each round cost
  // more than riding saved (16 ranks on the 16-core host: a 4 KiB all-reduce 20.9-25.9 us
  // with gathered rounds, 14.9 us with AND rounds; the 1-float latency beat MPI either way).
  constexpr int kMaxGatheredRanks = 8;
  gathered_ = transport_.size() > 2 && transport_.size() <= kMaxGatheredRanks &&
              config_.board_allreduce_max_bytes > 0;
  packed_.clear();
  if (!merged_ && !gathered_ && !solo_) {
    transport_.start_control_and(words.data(), words.size());
    return;
  }
  // Everything pending must be cached all-reduces of one kind for the data to ride along.
  const TensorEntry* first = pending.empty() ? nullptr : pending.front().get();
  size_t bytes = 0;
  for (auto& e : pending) {
    const Request& r = e->request;
    const Request& f = first->request;
    // (NCCL's tensors live on the device: the host cannot pack them. Adasum is no
    // element-wise reduction the merge could apply.)
    if (e->state != TensorEntry::State::CacheHit || r.op != OpType::Allreduce || r.nccl ||
        r.reduce_op == ReduceOp::Adasum ||
        r.compression != Compression::None || r.dtype != f.dtype || r.reduce_op != f.reduce_op ||
        r.prescale != f.prescale || r.postscale != f.postscale) {
      eligible = false;
      break;
    }
    bytes += e->bytes();
  }
  eligible = eligible && first && bytes <= (gathered_ ? config_.board_allreduce_max_bytes : kMergedDataBytes);
  packet_.assign(kHeaderWords + words.size() + room_words_, 0);
  packet_[0] = words.size();
  packet_[2] = eligible ? bytes : 0;
  std::copy(words.begin(), words.end(), packet_.begin() + kHeaderWords);
  if (eligible && bytes <= room_words_ * sizeof(uint64_t)) {
    for (auto& e : pending) packed_.push_back(e.get());
    std::sort(packed_.begin(), packed_.end(),
              [](const TensorEntry* a, const TensorEntry* b) { return a->cache_id < b->cache_id; });
    pack_prereduce(packed_, packet_.data() + kHeaderWords + words.size());
    packet_[1] = describe_data(bytes / dtype_size(first->request.dtype), first->request.dtype,
                               first->request.reduce_op);
  }
  if (solo_) return;  // the packet is the round's result already
  if (gathered_) {
    if (!transport_.start_control_gather(packet_.data(), packet_.size())) {
      gathered_ = false;
      packed_.clear();
      transport_.start_control_and(words.data(), words.size());
    }
    return;
  }
  peer_packet_.resize(packet_.size());
  if (!transport_.start_control_swap(packet_.data(), peer_packet_.data(), packet_.size())) {
    merged_ = false;
    packed_.clear();
    transport_.start_control_and(words.data(), words.size());
  }
}

void Controller::agree_room() {
  room_words_ = (static_cast<size_t>(packet_[2]) + sizeof(uint64_t) - 1) / sizeof(uint64_t);
}

bool Controller::finish_round(std::vector<uint64_t>& words) {
  if (solo_) {
    // The words are this rank's alone, and the data, when packed, is all there is to reduce.
    agree_room();
    return packet_[1] != 0 && !packed_.empty();
  }
  if (gathered_) return finish_gathered_round(words);
  if (!merged_) return false;
  // Both ranks merge rank 0's packet with rank 1's, in that order: the same result on both.
  if (transport_.rank() == 0) {
    merge_round(packet_.data(), peer_packet_.data(), packet_.size(), merge_scratch_[0]);
    packet_.swap(peer_packet_);
  } else {
    merge_round(peer_packet_.data(), packet_.data(), packet_.size(), merge_scratch_[0]);
  }
  std::copy(packet_.begin() + kHeaderWords, packet_.begin() + kHeaderWords + words.size(), words.begin());
  agree_room();
  if (packet_[1] == 0 || packed_.empty()) return false;
  // The data was this round's all-reduce: count it as data (what the ring would have moved
  // at 2 ranks, each way), not as negotiation.
  size_t bytes = 0;
  for (const TensorEntry* e : packed_) bytes += e->bytes();
  TransportStats& stats = transport_.stats();
  stats.control_bytes_sent -= bytes;
  stats.bytes_sent += bytes;
  stats.bytes_received += bytes;
  return true;
}

bool Controller::finish_gathered_round(std::vector<uint64_t>& words) {
  const int n = transport_.size(), me = transport_.rank();
  std::vector<const uint64_t*>& packets = gathered_packets_;
  packets.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) packets[r] = transport_.control_packet(r);
  // The round's decision: flags, ready, valid, staying (begin_round's layout).
  const size_t compare = 1 + 2 * nwords_ + rank_words_;
  const bool reduced = merge_gathered(packets, packet_.size(), compare, packet_.data(),
                                      merge_scratch_[0], merge_scratch_[1]) && !packed_.empty();
  std::copy(packet_.begin() + kHeaderWords, packet_.begin() + kHeaderWords + words.size(), words.begin());
  agree_room();
  if (!reduced) return false;
  // Count the data as the ring would have moved it (ring_allreduce.h), not as negotiation.
  size_t bytes = 0;
  for (const TensorEntry* e : packed_) bytes += e->bytes();
  const size_t es = dtype_size(packed_.front()->request.dtype);
  const Segments segs = even_segments(bytes / es, n);
  const uint64_t own = segs.count[me] * es;
  TransportStats& stats = transport_.stats();
  stats.control_bytes_sent -= bytes;
  stats.bytes_sent += bytes - own + static_cast<uint64_t>(n - 1) * own;
  stats.bytes_received += bytes - own + static_cast<uint64_t>(n - 1) * own;
  stats.board_allreduces += 1;
  return true;
}

std::vector<Response> Controller::ask_coordinator(EntryList& pending) {
  std::vector<Request> mine;
  for (auto& e : pending) {
    if (e->state == TensorEntry::State::Unannounced || e->state == TensorEntry::State::Announced) {
      mine.push_back(e->request);
      e->state = TensorEntry::State::Announced;
    }
  }
  std::vector<uint8_t> bytes;
  encode_requests(mine, bytes);
  std::vector<std::vector<uint8_t>> all = transport_.gather_control(bytes);
  std::vector<uint8_t> decided;
  if (transport_.rank() == 0) {
    std::vector<std::vector<Request>> by_rank;
    for (const auto& b : all) by_rank.push_back(decode_requests(b.data(), b.size()));
    std::vector<Response> decisions = decide_ready(by_rank, members_);
    Timeline::get().note_decisions(by_rank, decisions, members_);
    encode_responses(decisions, decided);
  }
  transport_.broadcast_control(decided);
  return decode_responses(decided.data(), decided.size());
}

bool Controller::wait_for_round(const EntryList& pending, bool patient, const Deadline* leave_at) {
  using clock = std::chrono::steady_clock;
  // A peer a few hundred nanoseconds behind is met by looks alone: a clock read costs as much
  // as several looks, and each one read between looks delays noticing the peer by as much.
  for (int look = 0; look < kLooksBeforeClock; ++look) {
    if (transport_.test_control()) return true;
  }
  const auto start = clock::now();
  // Peers usually arrive within microseconds: spin first. A patient waiter (a caller that
  // would only block otherwise) then polls on, yielding the core at each look, as MPI's own
  // blocking calls do on a shared machine; sleeping there would add the sleep (and the
  // wake-up, late under load) to every call whose peer came a little late.
  const auto spin = std::chrono::microseconds(100);
  const auto poll = patient ? std::chrono::microseconds(2000) : spin;
  const auto max_sleep = std::chrono::microseconds(static_cast<int64_t>(config_.cycle_time_ms * 1000));
  auto sleep = std::chrono::microseconds(10);
  while (!transport_.test_control()) {
    auto waited = clock::now() - start;
    if (waited < spin) continue;
    if (waited < poll) {
      std::this_thread::yield();
      continue;
    }
    check_stalls(pending);
    PeerChannel::progress_all();  // a thread may wait on this round while a transfer is due
    if (leave_at && clock::now() >= leave_at->when()) return false;
    if (transport_.control_waits_sleep()) continue;  // it sleeps until the peers ring
    std::this_thread::sleep_for(std::min(sleep, max_sleep));
    sleep *= 2;
  }
  return true;
}

}  // namespace hvdlite
