#include "engine/cross_set_deadlock.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "engine/deadlock.h"
#include "engine/rank_computing.h"
#include "engine/validate.h"
#include "observability/side_message.h"

namespace hvdlite {
namespace {

// Side-channel kinds (side_message.h); the stall inspector's are below 16.
enum Kind : uint8_t {
  kReport = 16,     // (streak, sets)
  kConfirm = 17,    // (seq, streak)
  kConfirmed = 18,  // (seq, streak, yes)
  kDeclare = 19,    // (seq, message)
  kAck = 20,        // (seq)
  kStop = 21,       // ()
};

Membership membership(const SetWaits& s) {
  return Membership{s.set_id, s.set_id == 0 ? std::vector<int>{} : s.ranks};
}

}  // namespace

std::vector<uint8_t> encode_set_waits(const std::vector<SetWaits>& sets) {
  SideWriter w;
  w.put(static_cast<uint32_t>(sets.size()));
  for (const SetWaits& s : sets) {
    w.put(static_cast<int32_t>(s.set_id));
    w.put(static_cast<uint32_t>(s.ranks.size()));
    for (int r : s.ranks) w.put(static_cast<int32_t>(r));
    w.put(s.waits);
    w.put(s.pending);
  }
  return w.out;
}

std::vector<SetWaits> decode_set_waits(const std::vector<uint8_t>& bytes, size_t at) {
  SideReader in{bytes, at};
  std::vector<SetWaits> sets(in.get<uint32_t>());
  for (SetWaits& s : sets) {
    s.set_id = in.get<int32_t>();
    s.ranks.resize(in.get<uint32_t>());
    for (int& r : s.ranks) r = in.get<int32_t>();
    s.waits = in.names();
    s.pending = in.names();
  }
  return sets;
}

std::string describe_cross_set_deadlock(const std::map<int, std::vector<SetWaits>>& by_rank,
                                        double stuck_s) {
  // Whether `member` has submitted `name` in `set` (a name it has pending there).
  auto submitted = [&](int member, const SetWaits& set, const std::string& name) {
    auto it = by_rank.find(member);
    return it != by_rank.end() &&
           std::any_of(it->second.begin(), it->second.end(), [&](const SetWaits& theirs) {
             return theirs.set_id == set.set_id &&
                    std::find(theirs.pending.begin(), theirs.pending.end(), name) != theirs.pending.end();
           });
  };
  // Ranks waiting for the same things go together, in order of their first rank.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const auto& [rank, sets] : by_rank) {
    std::ostringstream waits;
    int n = 0;
    for (const SetWaits& s : sets) {
      for (const std::string& name : s.waits) {
        // "'x' in process set 1 (ranks 0, 1), not submitted by rank 1"
        waits << (n++ ? " and " : "") << "'" << name << "' in " << membership(s).name();
        std::vector<int> missing;
        for (int member : s.ranks) {
          if (!submitted(member, s, name)) missing.push_back(member);
        }
        if (!missing.empty()) waits << ", not submitted by " << ranks_and(missing);
      }
    }
    if (n == 0) waits << "nothing";
    auto same = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == waits.str(); });
    if (same == groups.end()) groups.push_back({waits.str(), {rank}});
    else same->second.push_back(rank);
  }
  std::ostringstream s;
  s << "deadlock across process sets: every rank has been blocked waiting for "
    << std::setprecision(3) << stuck_s << " s (twice HVDLITE_DEADLOCK_TIME_SECONDS) on collectives that "
    << "cannot run: ";
  for (size_t g = 0; g < groups.size(); ++g) {
    s << (g ? "; " : "") << ranks_and(groups[g].second)
      << (groups[g].second.size() == 1 ? " waits for " : " wait for ") << groups[g].first;
  }
  s << ". Ranks that share process sets must submit their collectives in the same order. "
       "hvdlite has stopped: every pending and later collective fails with this error";
  return s.str();
}

CrossSetDeadlock::CrossSetDeadlock(Transport& world, double grace_s, RankActivity& activity,
                                   Describe describe, Stop stop)
    : world_(world), stuck_s_(2 * grace_s), activity_(activity), describe_(std::move(describe)),
      stop_(std::move(stop)) {}

std::chrono::milliseconds CrossSetDeadlock::poll_interval() const {
  if (!enabled()) return std::chrono::hours(1);
  // A twentieth of the time, 10-200 ms: the stall inspector's pace.
  return std::chrono::milliseconds(std::clamp<int64_t>(static_cast<int64_t>(stuck_s_ * 50), 10, 200));
}

bool CrossSetDeadlock::owns(const std::vector<uint8_t>& bytes) {
  return !bytes.empty() && bytes[0] >= kReport && bytes[0] <= kStop;
}

void CrossSetDeadlock::observe(Clock::time_point now) {
  // Not while another thread computes (Note [computing ranks]): the same window as the
  // per-group detector's, a quarter of HVDLITE_DEADLOCK_TIME_SECONDS.
  const bool stuck = activity_.stuck() && !rank_computing(stuck_s_ / 2);
  const uint64_t progress = activity_.progress();
  if (stuck && stuck_ && progress == progress_) return;  // the streak goes on
  stuck_ = stuck;
  if (!stuck) return;
  ++streak_;
  since_ = now;
  progress_ = progress;
  reported_ = false;
}

double CrossSetDeadlock::stuck_for(Clock::time_point now) const {
  return stuck_ ? std::chrono::duration<double>(now - since_).count() : 0.0;
}

void CrossSetDeadlock::send_all(const std::vector<uint8_t>& bytes) {
  for (int r = 0; r < world_.size(); ++r) {
    if (r != world_.rank()) world_.send_side(bytes, r);
  }
}

void CrossSetDeadlock::poll() {
  if (!enabled() || stopped_) return;
  const auto now = Clock::now();
  observe(now);
  if (world_.rank() == 0) return decide(now);
  if (stuck_ && !reported_ && stuck_for(now) >= stuck_s_) {
    SideWriter w(kReport);
    w.put(streak_);
    const std::vector<uint8_t> sets = encode_set_waits(describe_());
    w.out.insert(w.out.end(), sets.begin(), sets.end());
    world_.send_side(w.out, 0);
    reported_ = true;
  }
}

void CrossSetDeadlock::decide(Clock::time_point now) {
  const size_t others = static_cast<size_t>(world_.size() - 1);
  switch (phase_) {
    case Phase::Collecting: {
      if (stuck_for(now) < stuck_s_) {
        reports_.erase(0);
        return;
      }
      if (!reports_.count(0) || reports_[0].streak != streak_) reports_[0] = {streak_, describe_()};
      if (reports_.size() < others + 1) return;
      ++seq_;
      own_streak_ = streak_;
      answered_.clear();
      phase_ = Phase::Confirming;
      for (const auto& [rank, report] : reports_) {
        if (rank == 0) continue;
        SideWriter w(kConfirm);
        w.put(seq_);
        w.put(report.streak);
        world_.send_side(w.out, rank);
      }
      return;
    }
    case Phase::Confirming: {
      if (!stuck_ || streak_ != own_streak_) {  // rank 0 itself moved on
        reports_.erase(0);
        phase_ = Phase::Collecting;
        return;
      }
      if (answered_.size() < others) return;
      std::map<int, std::vector<SetWaits>> by_rank;
      for (const auto& [rank, report] : reports_) by_rank[rank] = report.sets;
      message_ = describe_cross_set_deadlock(by_rank, stuck_s_);
      activity_.set_deadlock(message_);
      answered_.clear();
      phase_ = Phase::Declaring;
      SideWriter w(kDeclare);
      w.put(seq_);
      w.put(message_);
      send_all(w.out);
      return;
    }
    case Phase::Declaring: {
      if (answered_.size() < others) return;
      send_all(SideWriter(kStop).out);
      stopped_ = true;
      stop_(message_);
      return;
    }
  }
}

void CrossSetDeadlock::on_message(const std::vector<uint8_t>& bytes, int from) {
  if (!owns(bytes) || stopped_) return;
  SideReader in{bytes};
  switch (bytes[0]) {
    case kReport: {
      Report r;
      r.streak = in.get<uint64_t>();
      r.sets = decode_set_waits(bytes, in.at);
      reports_[from] = std::move(r);
      break;
    }
    case kConfirm: {
      const uint32_t seq = in.get<uint32_t>();
      const uint64_t streak = in.get<uint64_t>();
      observe(Clock::now());
      SideWriter w(kConfirmed);
      w.put(seq);
      w.put(streak);
      w.put(static_cast<uint8_t>(stuck_ && streak_ == streak));
      world_.send_side(w.out, from);
      break;
    }
    case kConfirmed: {
      const uint32_t seq = in.get<uint32_t>();
      const uint64_t streak = in.get<uint64_t>();
      const bool yes = in.get<uint8_t>() != 0;
      if (phase_ != Phase::Confirming || seq != seq_) break;  // an answer to an old question
      if (yes) {
        answered_.insert(from);
        break;
      }
      auto it = reports_.find(from);  // stale until that rank's next streak reports
      if (it != reports_.end() && it->second.streak == streak) reports_.erase(it);
      phase_ = Phase::Collecting;
      break;
    }
    case kDeclare: {
      const uint32_t seq = in.get<uint32_t>();
      activity_.set_deadlock(in.str());
      SideWriter w(kAck);
      w.put(seq);
      world_.send_side(w.out, from);
      break;
    }
    case kAck:
      if (phase_ == Phase::Declaring && in.get<uint32_t>() == seq_) answered_.insert(from);
      break;
    case kStop: {
      stopped_ = true;
      const std::optional<std::string> message = activity_.deadlock();
      stop_(message ? *message : "deadlock across process sets (declared by rank 0)");
      break;
    }
  }
}

}  // namespace hvdlite
