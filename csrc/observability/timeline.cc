#include "observability/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "engine/rank_computing.h"
#include "hvdlite.h"

namespace hvdlite {
namespace {

// Events waiting for the writer at most; beyond this the engine drops events, never waits.
constexpr size_t kQueueCapacity = 1 << 16;
// The writer wakes this often, or when the queue is a quarter full: waking it per event
// would cost the engine a context switch per collective.
constexpr auto kWriteInterval = std::chrono::milliseconds(100);
constexpr size_t kWakeWriterAt = kQueueCapacity / 4;
constexpr const char* kClosing = "\n]\n";

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "]";
}

// Microseconds with nanosecond digits, so that nested spans stay nested after printing.
void append_us(std::string& out, int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  out += buf;
}

bool write_at(int fd, const std::string& data, int64_t offset) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Timeline& Timeline::get() {
  static Timeline timeline;
  return timeline;
}

Timeline::~Timeline() { stop(); }

void Timeline::start(const std::string& path, int rank, bool mark_cycles) {
  std::lock_guard<std::mutex> lk(start_mu_);
  if (writer_.joinable()) {
    active_ = false;
    {
      std::lock_guard<std::mutex> q(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    writer_.join();
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error(Status::InvalidArgument,
                "cannot write the timeline to '" + path + "': " + std::strerror(errno));
  }
  const std::string head = "[";
  if (!write_at(fd, head + kClosing, 0)) {
    ::close(fd);
    throw Error(Status::InvalidArgument, "cannot write the timeline to '" + path + "'");
  }
  fd_ = fd;
  rank_ = rank;
  start_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  tail_ = static_cast<int64_t>(head.size());
  first_event_ = true;
  tids_.clear();
  {
    std::lock_guard<std::mutex> q(mu_);
    queue_.clear();
    dropped_ = 0;
    stopping_ = false;
  }
  mark_cycles_ = mark_cycles;
  writer_ = std::thread([this] { write_loop(); });
  active_ = true;
}

void Timeline::stop() {
  std::lock_guard<std::mutex> lk(start_mu_);
  active_ = false;
  if (!writer_.joinable()) return;
  {
    std::lock_guard<std::mutex> q(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  writer_.join();
}

int64_t Timeline::since_start(Clock::time_point t) const {
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  return std::max<int64_t>(0, ns - start_ns_.load(std::memory_order_relaxed));
}

void Timeline::push(Event e) {
  bool wake;
  {
    std::lock_guard<std::mutex> q(mu_);
    if (queue_.size() >= kQueueCapacity) {
      ++dropped_;
      return;
    }
    queue_.push_back(std::move(e));
    wake = queue_.size() == kWakeWriterAt;
  }
  if (wake) cv_.notify_one();
}

void Timeline::span(const std::string& track, const char* name, Clock::time_point begin,
                    Clock::time_point end, std::string args) {
  if (!active()) return;
  const int64_t b = since_start(begin);
  push({'X', name, track, b, std::max<int64_t>(0, since_start(end) - b), std::move(args)});
}

void Timeline::instant(const std::string& track, const char* name, Clock::time_point at,
                       std::string args) {
  if (!active()) return;
  push({'i', name, track, since_start(at), 0, std::move(args)});
}

void Timeline::counter(const char* name, Clock::time_point at, const char* series, double value) {
  if (!active()) return;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  push({'C', name, "", since_start(at), 0, json_string(series) + ":" + buf});
}

std::string Timeline::format(const std::vector<Event>& events) {
  std::string out;
  auto begin_event = [&]() {
    out += first_event_ ? "\n" : ",\n";
    first_event_ = false;
  };
  for (const Event& e : events) {
    int tid = 0;
    if (e.phase != 'C') {
      auto it = tids_.find(e.track);
      if (it == tids_.end()) {
        // A new track: name it (tid order = order of first appearance).
        tid = static_cast<int>(tids_.size()) + 1;
        tids_.emplace(e.track, tid);
        begin_event();
        out += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) +
               ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":" + json_string(e.track) + "}}";
        begin_event();
        out += "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) +
               ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"sort_index\":" + std::to_string(tid) + "}}";
      } else {
        tid = it->second;
      }
    }
    begin_event();
    out += "{\"name\":" + json_string(e.name) + ",\"ph\":\"" + e.phase + "\",\"pid\":" +
           std::to_string(rank_) + ",\"tid\":" + std::to_string(tid) + ",\"ts\":";
    append_us(out, e.begin_ns);
    if (e.phase == 'X') {
      out += ",\"dur\":";
      append_us(out, e.dur_ns);
    }
    if (e.phase == 'i') out += ",\"s\":\"t\"";
    if (!e.args.empty()) out += ",\"args\":{" + e.args + "}";
    out += "}";
  }
  return out;
}

void Timeline::write_loop() {
  HvdliteThread::mark_for_life();  // Note [computing ranks]
  {
    // The process track's name: which rank this file shows.
    std::string meta = "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) +
                       ",\"args\":{\"name\":\"hvdlite rank " + std::to_string(rank_) + "\"}}";
    first_event_ = false;
    if (write_at(fd_, "\n" + meta + kClosing, tail_)) tail_ += 1 + static_cast<int64_t>(meta.size());
  }
  std::vector<Event> batch;
  bool failed = false;
  while (true) {
    size_t dropped;
    bool stopping;
    {
      std::unique_lock<std::mutex> q(mu_);
      cv_.wait_for(q, kWriteInterval, [&] { return queue_.size() >= kWakeWriterAt || stopping_; });
      batch.swap(queue_);
      dropped = dropped_;
      dropped_ = 0;
      stopping = stopping_;
    }
    if (dropped > 0) {
      batch.push_back({'i', "EVENTS_DROPPED", "timeline", batch.empty() ? 0 : batch.back().begin_ns, 0,
                       "\"events\":" + std::to_string(dropped)});
    }
    if (!batch.empty() && !failed) {
      // One write per batch that also moves the closing bracket: the file is always whole JSON.
      std::string text = format(batch);
      if (write_at(fd_, text + kClosing, tail_)) {
        tail_ += static_cast<int64_t>(text.size());
      } else {
        std::fprintf(stderr, "[hvdlite] warning: writing the timeline failed (%s); it stops here\n",
                     std::strerror(errno));
        failed = true;
      }
    }
    batch.clear();
    if (stopping) break;
  }
  ::close(fd_);
  fd_ = -1;
}

void Timeline::note_decisions(const std::vector<std::vector<Request>>& requests_by_rank,
                              const std::vector<Response>& decided, const Membership& members) {
  if (!active()) return;
  std::lock_guard<std::mutex> lk(late_mu_);
  std::unordered_map<std::string, std::vector<int>> now;
  for (size_t r = 0; r < requests_by_rank.size(); ++r) {
    for (const Request& q : requests_by_rank[r]) now[q.name].push_back(static_cast<int>(r));
  }
  for (auto& [name, ranks] : now) first_seen_.emplace(name, ranks);
  for (const Response& d : decided) {
    auto it = first_seen_.find(d.name);
    if (it == first_seen_.end()) continue;
    std::set<int> early(it->second.begin(), it->second.end());
    std::vector<int> late;
    for (int r = 0; r < static_cast<int>(requests_by_rank.size()); ++r) {
      if (!early.count(r)) late.push_back(members.global(r));
    }
    late_[d.name] = std::move(late);
    first_seen_.erase(it);
  }
}

void Timeline::note_late_ranks(const std::string& name, std::vector<int> ranks) {
  if (!active() || ranks.empty()) return;
  std::lock_guard<std::mutex> lk(late_mu_);
  late_[name] = std::move(ranks);
}

std::vector<int> Timeline::take_late_ranks(const std::string& name) {
  std::lock_guard<std::mutex> lk(late_mu_);
  auto it = late_.find(name);
  if (it == late_.end()) return {};
  std::vector<int> late = std::move(it->second);
  late_.erase(it);
  return late;
}

void check_timeline_path(const std::string& path, const char* setting) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, std::max<size_t>(slash, 1));
  if (::access(dir.c_str(), W_OK) != 0) {
    throw Error(Status::InvalidArgument, std::string(setting) + "='" + path + "': cannot write to '" +
                dir + "' (" + std::strerror(errno) + ")");
  }
}

namespace {

// The request's span is named by its op (event names are string literals). A switch, so a
// new op without a name here is a compiler warning.
const char* op_span_name(OpType op) {
  switch (op) {
    case OpType::Allreduce: return "ALLREDUCE";
    case OpType::Allgather: return "ALLGATHER";
    case OpType::Broadcast: return "BROADCAST";
    case OpType::Alltoall: return "ALLTOALL";
    case OpType::Reducescatter: return "REDUCESCATTER";
    case OpType::Barrier: return "BARRIER";
    case OpType::Join: return "JOIN";
    case OpType::AddProcessSet: return "ADD_PROCESS_SET";
    case OpType::RemoveProcessSet: return "REMOVE_PROCESS_SET";
  }
  return "COLLECTIVE";
}

}  // namespace

void start_timeline_on_rank(const std::string& path, int rank, bool all_ranks, bool mark_cycles) {
  if (path.empty()) {
    throw Error(Status::InvalidArgument, "start_timeline() needs a file name");
  }
  if (!all_ranks) {
    if (rank == 0) Timeline::get().start(path, rank, mark_cycles);
    return;
  }
  const size_t slash = path.find_last_of('/');
  size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) dot = path.size();
  Timeline::get().start(path.substr(0, dot) + "." + std::to_string(rank) + path.substr(dot), rank,
                        mark_cycles);
}

void trace_drained(TensorEntry& entry) {
  if (Timeline::get().active()) entry.trace.drained = Clock::now();
}

void trace_negotiated(TensorEntry& entry) {
  Timeline& tl = Timeline::get();
  if (!tl.active()) return;
  entry.trace.decided = Clock::now();
  // An entry enqueued before the timeline started has no drain time: treat it as drained now.
  if (entry.trace.drained < entry.enqueued) entry.trace.drained = entry.trace.decided;
  const std::string& name = entry.request.name;
  tl.span(name, "QUEUE", entry.enqueued, entry.trace.drained);
  std::string args = entry.state == TensorEntry::State::CacheHit ? "\"path\":\"cache\""
                                                                 : "\"path\":\"coordinator\"";
  std::vector<int> late = tl.take_late_ranks(name);
  if (!late.empty()) args += ",\"late_ranks\":" + rank_list(late);
  tl.span(name, "NEGOTIATE", entry.trace.drained, entry.trace.decided, std::move(args));
}

void trace_completed(TensorEntry& entry, bool ok) {
  Timeline& tl = Timeline::get();
  if (!tl.active() || entry.trace.decided < entry.enqueued) return;  // not negotiated while on
  const auto now = Clock::now();
  const std::string& name = entry.request.name;
  if (!entry.trace.phases_written) tl.span(name, "EXECUTE", entry.trace.decided, now);
  tl.instant(name, "COMPLETE", now, ok ? "" : "\"error\":true");
  std::string args = "\"op\":\"" + std::string(op_name(entry.request.op)) + "\",\"dtype\":\"" +
                     dtype_name(entry.request.dtype) + "\",\"shape\":\"" +
                     shape_string(entry.request.shape) + "\"";
  tl.span(name, op_span_name(entry.request.op), entry.enqueued, now, std::move(args));
}

void trace_round() {
  Timeline& tl = Timeline::get();
  if (tl.active() && tl.mark_cycles()) tl.instant("cycles", "CYCLE_START", Clock::now());
}

void trace_fused_member(TensorEntry& entry, const BatchTimes& t, const char* pack_phase,
                        const char* unpack_phase) {
  Timeline& tl = Timeline::get();
  if (!tl.active() || entry.trace.decided < entry.enqueued) return;
  const std::string& name = entry.request.name;
  tl.span(name, "WAIT_FOR_DATA", entry.trace.decided, t.start);
  tl.span(name, pack_phase, t.start, t.packed);
  if (t.adasum) {
    tl.span(name, "MPI_ADASUM_ALLREDUCE", t.packed, t.reduced);
  } else if (t.hierarchical) {
    tl.span(name, "HIERARCHICAL_INTRA_REDUCE_SCATTER", t.packed, t.stages.scattered);
    tl.span(name, "HIERARCHICAL_CROSS_ALLREDUCE", t.stages.scattered, t.stages.crossed);
    tl.span(name, "HIERARCHICAL_INTRA_ALLGATHER", t.stages.crossed, t.reduced);
  } else if (t.exchange) {
    tl.span(name, "EXCHANGE_ALLREDUCE", t.packed, t.reduced);
  } else if (t.shared_memory) {
    tl.span(name, "SHM_ALLREDUCE", t.packed, t.reduced);
  } else {
    tl.span(name, "RING_REDUCE_SCATTER", t.packed, t.scattered);
    tl.span(name, "RING_ALLGATHER", t.scattered, t.reduced);
  }
  if (unpack_phase) tl.span(name, unpack_phase, t.reduced, t.unpacked);
  entry.trace.phases_written = true;
}

PhaseTrace::PhaseTrace(TensorEntry& entry) {
  if (!Timeline::get().active() || entry.trace.decided < entry.enqueued) return;
  entry_ = &entry;
  last_ = Clock::now();
}

void PhaseTrace::end(const char* phase) {
  if (!entry_) return;
  const auto now = Clock::now();
  Timeline::get().span(entry_->request.name, phase, last_, now);
  entry_->trace.phases_written = true;
  last_ = now;
}

void trace_round_bytes(size_t bytes) {
  Timeline& tl = Timeline::get();
  if (tl.active() && bytes > 0) tl.counter("fused_bytes", Clock::now(), "bytes", static_cast<double>(bytes));
}

}  // namespace hvdlite
