// The deadlock detector. Note [deadlock]:
// A group is deadlocked when every member has a thread blocked waiting on one of its requests
// and no request has been submitted by every member that must submit it: then nothing can
// ever run (unless another thread submits). The ranks cannot see each other's threads, but
// they meet every negotiation round, so each rank adds two bits to word 0 of the round (ANDed
// over the members):
//   kBlocked    a thread of this rank waits on one of its pending requests, and the process
//               is not computing elsewhere (Note [computing ranks] in rank_computing.h)
//   kGraceOver  kBlocked, and every round since this rank saw the streak begin was like it
//               for HVDLITE_DEADLOCK_TIME_SECONDS
// A streak begins with the first round whose AND says every member was blocked and which ran
// nothing, and ends with any round that ran something or in which some member was not
// blocked. The round whose AND carries kGraceOver is the same on every rank, so every rank
// declares the deadlock in the same round; the members then exchange what each waits for
// (describe_deadlock) and fail those requests with Status::Deadlock: every member's, or only
// those of the ranks that fell behind (Note [the ranks that fell behind]). A rank that is
// computing, in any thread, is not blocked, and a frozen rank holds every round up: neither
// trips it.
//
// Note [the ranks that fell behind]
// The usual way into a deadlock is a failure only some ranks see: an exception on some ranks
// (a test that fails on one rank's data only) skips the rest of what they would have
// submitted, and they go on to their next collective, while the others still wait in the one
// they skipped. Failing every waited-for request then sends the ranks that went on one step
// further (their next collective raises too), and the ranks stay out of step for good. So the
// members compare how long each has waited (RankWaits::waited_s, the age of its oldest
// waited-for request): when some waited more than kBehindMargin longer than the rank that
// blocked last, they fell behind (the others went on without them) and only their requests
// fail; the others' stay pending, for the ranks behind to reach once their error has taken
// them past what was skipped. Ranks that blocked at about the same time (a collective whose
// name or order differs between ranks) all get the error, as before. A wrong guess costs one
// more grace period: should the ranks behind wait on something else again, that is a new
// deadlock in which the others now waited longest. Unnamed requests pending across such a
// partial failure were named in the old numbering, so the set's numbering starts over only at
// the first round after it that runs something, a point in the agreed order that every member
// meets (Group::restart_names_at_next_run_; Note [unnamed names after a failure]).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/validate.h"

namespace hvdlite {

class DeadlockDetector {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint64_t kBlocked = 16;
  static constexpr uint64_t kGraceOver = 32;
  static constexpr uint64_t kBits = kBlocked | kGraceOver;

  // grace_s: HVDLITE_DEADLOCK_TIME_SECONDS (0: never declares one).
  explicit DeadlockDetector(double grace_s) : grace_s_(grace_s) {}
  bool enabled() const { return grace_s_ > 0; }

  // The bits this rank sets in word 0 of a round it starts at `now`.
  uint64_t flags(bool blocked, Clock::time_point now) const;
  // After the round: `word0` is the members' AND, `ran` whether the round ran anything.
  // True when the members agree the group is deadlocked (then the streak starts over).
  bool observe(uint64_t word0, bool ran, Clock::time_point now);

  // The same at the present time, reading the clock only where the answer depends on it: in
  // a blocked rank's streak (flags), where a streak starts (observe). Every round calls
  // these, and most rounds are neither (Note [a wait's first slice] in bindings.cc).
  uint64_t flags(bool blocked) const;
  bool observe(uint64_t word0, bool ran);

 private:
  // Both forms of each: `now()` gives the time, called only where it is needed.
  template <class Now>
  uint64_t flags_at(bool blocked, const Now& now) const;
  template <class Now>
  bool observe_at(uint64_t word0, bool ran, const Now& now);

  double grace_s_;
  bool streak_ = false;
  Clock::time_point since_;
};

// "rank 1", "ranks 0 and 2", "ranks 0, 2 and 3": who waits.
std::string ranks_and(const std::vector<int>& ranks);

// What one member waits for and what it has pending (waited-for names included).
struct RankWaits {
  std::vector<std::string> waits;
  std::vector<std::string> pending;
  double waited_s = 0;  // the age of its oldest waited-for request, in seconds
};

// How much longer than the last rank to block a rank must have waited to have fallen behind
// (Note [the ranks that fell behind]): above the jitter of ranks that reach a collective
// together, below the time an exception handler or a test runner takes to move on.
constexpr double kBehindMargin = 0.2;

// Which members fell behind (Note [the ranks that fell behind]); all false when none did.
std::vector<bool> fell_behind(const std::vector<RankWaits>& by_member);

// The error every waited-for request gets: per rank (by global rank, ranks that wait for the
// same names together) what it waits for and which ranks submitted each:
//   "ranks 0 and 2 wait for 'y' (submitted by ranks 0, 2), rank 1 waits for 'x' (submitted by
//    rank 1)"
// by_member[i] is member i's report; behind: fell_behind's answer.
std::string describe_deadlock(const std::vector<RankWaits>& by_member, const Membership& members,
                              double grace_s, const std::vector<bool>& behind);

// The wire form of a RankWaits (gathered to the coordinator).
std::vector<uint8_t> encode_waits(const RankWaits& waits);
RankWaits decode_waits(const std::vector<uint8_t>& bytes);

}  // namespace hvdlite
