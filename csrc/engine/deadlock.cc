#include "engine/deadlock.h"

#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "hvdlite.h"

namespace hvdlite {
namespace {

// "rank 1", "ranks 0 and 2", "ranks 0, 2 and 3": who waits.
std::string ranks_and(const std::vector<int>& ranks) {
  std::ostringstream s;
  s << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) {
    s << (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") << ranks[i];
  }
  return s.str();
}

// "rank 1", "ranks 0, 2": who submitted.
std::string ranks_list(const std::vector<int>& ranks) {
  std::ostringstream s;
  s << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) s << (i ? ", " : "") << ranks[i];
  return s.str();
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

void put_names(std::vector<uint8_t>& out, const std::vector<std::string>& names) {
  put_u32(out, static_cast<uint32_t>(names.size()));
  for (const std::string& n : names) {
    put_u32(out, static_cast<uint32_t>(n.size()));
    out.insert(out.end(), n.begin(), n.end());
  }
}

struct In {
  const std::vector<uint8_t>& bytes;
  size_t at = 0;
  uint32_t u32() {
    uint32_t v;
    if (at + sizeof v > bytes.size()) throw Error(Status::Internal, "malformed deadlock report");
    std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::vector<std::string> names() {
    std::vector<std::string> out(u32());
    for (std::string& n : out) {
      const uint32_t len = u32();
      if (at + len > bytes.size()) throw Error(Status::Internal, "malformed deadlock report");
      n.assign(reinterpret_cast<const char*>(bytes.data() + at), len);
      at += len;
    }
    return out;
  }
};

}  // namespace

uint64_t DeadlockDetector::flags(bool blocked, Clock::time_point now) const {
  if (!enabled() || !blocked) return 0;
  const bool over = streak_ && std::chrono::duration<double>(now - since_).count() >= grace_s_;
  return kBlocked | (over ? kGraceOver : 0);
}

bool DeadlockDetector::observe(uint64_t word0, bool ran, Clock::time_point now) {
  if (!enabled()) return false;
  if (word0 & kGraceOver) {
    streak_ = false;
    return true;
  }
  if (ran || !(word0 & kBlocked)) {
    streak_ = false;
  } else if (!streak_) {
    streak_ = true;
    since_ = now;
  }
  return false;
}

std::string describe_deadlock(const std::vector<RankWaits>& by_member, const Membership& members,
                              double grace_s) {
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
  s << ". The ranks' collectives differ (names, or the order of conditional collectives); "
       "each of these requests fails on every rank, and later collectives work as before";
  return s.str();
}

std::vector<uint8_t> encode_waits(const RankWaits& waits) {
  std::vector<uint8_t> out;
  put_names(out, waits.waits);
  put_names(out, waits.pending);
  return out;
}

RankWaits decode_waits(const std::vector<uint8_t>& bytes) {
  In in{bytes};
  RankWaits w;
  w.waits = in.names();
  w.pending = in.names();
  return w;
}

}  // namespace hvdlite
