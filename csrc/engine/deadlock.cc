#include "engine/deadlock.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "hvdlite.h"
#include "observability/side_message.h"

namespace hvdlite {
namespace {

// "rank 1", "ranks 0, 2": who submitted.
std::string ranks_list(const std::vector<int>& ranks) {
  std::ostringstream s;
  s << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) s << (i ? ", " : "") << ranks[i];
  return s.str();
}

}  // namespace

std::string ranks_and(const std::vector<int>& ranks) {
  std::ostringstream s;
  s << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) {
    s << (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") << ranks[i];
  }
  return s.str();
}

template <class Now>
uint64_t DeadlockDetector::flags_at(bool blocked, const Now& now) const {
  if (!enabled() || !blocked) return 0;
  const bool over = streak_ && std::chrono::duration<double>(now() - since_).count() >= grace_s_;
  return kBlocked | (over ? kGraceOver : 0);
}

template <class Now>
bool DeadlockDetector::observe_at(uint64_t word0, bool ran, const Now& now) {
  if (!enabled()) return false;
  if (word0 & kGraceOver) {
    streak_ = false;
    return true;
  }
  if (ran || !(word0 & kBlocked)) {
    streak_ = false;
  } else if (!streak_) {
    streak_ = true;
    since_ = now();
  }
  return false;
}

uint64_t DeadlockDetector::flags(bool blocked, Clock::time_point now) const {
  return flags_at(blocked, [now] { return now; });
}

uint64_t DeadlockDetector::flags(bool blocked) const { return flags_at(blocked, Clock::now); }

bool DeadlockDetector::observe(uint64_t word0, bool ran, Clock::time_point now) {
  return observe_at(word0, ran, [now] { return now; });
}

bool DeadlockDetector::observe(uint64_t word0, bool ran) { return observe_at(word0, ran, Clock::now); }

namespace {
// How long the last member to block has waited (the shortest wait; 0 without members).
double last_to_block(const std::vector<RankWaits>& by_member) {
  double last = by_member.empty() ? 0.0 : by_member[0].waited_s;
  for (const RankWaits& w : by_member) last = std::min(last, w.waited_s);
  return last;
}
}  // namespace

std::vector<bool> fell_behind(const std::vector<RankWaits>& by_member) {
  const double last = last_to_block(by_member);
  std::vector<bool> behind(by_member.size(), false);
  for (size_t m = 0; m < by_member.size(); ++m) behind[m] = by_member[m].waited_s > last + kBehindMargin;
  return behind;
}

std::string describe_deadlock(const std::vector<RankWaits>& by_member, const Membership& members,
                              double grace_s, const std::vector<bool>& behind) {
  // Who submitted each name (global ranks, ascending since members are).
  std::map<std::string, std::vector<int>> submitted;
  for (size_t m = 0; m < by_member.size(); ++m) {
    for (const std::string& name : by_member[m].pending) {
      std::vector<int>& who = submitted[name];
      if (who.empty() || who.back() != members.global(static_cast<int>(m))) {
        who.push_back(members.global(static_cast<int>(m)));
      }
    }
  }
  // Ranks that wait for the same names go together, in order of their first rank.
  std::vector<std::pair<std::vector<std::string>, std::vector<int>>> groups;
  for (size_t m = 0; m < by_member.size(); ++m) {
    const std::vector<std::string>& waits = by_member[m].waits;
    bool found = false;
    for (auto& g : groups) {
      if (g.first == waits) {
        g.second.push_back(members.global(static_cast<int>(m)));
        found = true;
        break;
      }
    }
    if (!found) groups.push_back({waits, {members.global(static_cast<int>(m))}});
  }
  std::ostringstream s;
  s << "deadlock" << members.where() << ": every rank has been blocked waiting for "
    << std::lround(grace_s) << " s (HVDLITE_DEADLOCK_TIME_SECONDS) on collectives that not "
    << "every rank submitted: ";
  constexpr size_t kMaxNames = 8;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& [waits, ranks] = groups[g];
    s << (g ? ", " : "") << ranks_and(ranks) << (ranks.size() == 1 ? " waits for " : " wait for ");
    if (waits.empty()) s << "nothing pending";
    for (size_t i = 0; i < waits.size() && i < kMaxNames; ++i) {
      s << (i == 0 ? "" : i + 1 == waits.size() ? " and " : ", ") << "'" << waits[i]
        << "' (submitted by " << ranks_list(submitted[waits[i]]) << ")";
    }
    if (waits.size() > kMaxNames) s << " and " << waits.size() - kMaxNames << " more";
  }
  s << ". The ranks' collectives differ (names, or the order of conditional collectives); ";
  std::vector<int> late;
  double longest = 0;
  for (size_t m = 0; m < by_member.size(); ++m) {
    if (m < behind.size() && behind[m]) {
      late.push_back(members.global(static_cast<int>(m)));
      longest = std::max(longest, by_member[m].waited_s);
    }
  }
  const double last = last_to_block(by_member);  // never one that fell behind
  if (late.empty()) {
    s << "each of these requests fails on every rank, and later collectives work as before";
  } else {
    char gap[32];
    std::snprintf(gap, sizeof gap, "%.1f", longest - last);
    s << ranks_and(late) << (late.size() == 1 ? " has" : " have") << " waited longest (up to "
      << gap << " s before the others blocked): the others went on without "
      << (late.size() == 1 ? "it" : "them") << ", so only " << (late.size() == 1 ? "its" : "their")
      << " requests fail, and the others' stay pending for " << (late.size() == 1 ? "it" : "them")
      << " to catch up";
  }
  return s.str();
}

std::vector<uint8_t> encode_waits(const RankWaits& waits) {
  SideWriter w;
  w.put(waits.waits);
  w.put(waits.pending);
  w.put(waits.waited_s);
  return w.out;
}

RankWaits decode_waits(const std::vector<uint8_t>& bytes) {
  SideReader in{bytes, 0};
  RankWaits w;
  w.waits = in.names();
  w.pending = in.names();
  w.waited_s = in.get<double>();
  return w;
}

}  // namespace hvdlite
