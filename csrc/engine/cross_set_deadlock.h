// The cross-set deadlock watch. Note [deadlock across process sets]:
// The per-group detector (deadlock.h) sees a group's members only. When rank 0 waits for 'x'
// in process set [0, 1] while rank 1 waits for 'y' in the global set, neither group has all
// its members blocked on its own requests, and rank 1 never even joins set [0, 1]'s round:
// both would wait for ever. The watch looks at whole ranks instead (rank_activity.h): a rank
// is stuck while a thread waits on a request, nothing runs, nothing is submitted or completed
// and the process does not compute in another thread (Note [computing ranks]). When every rank of the job has been stuck, all at once, for twice
// HVDLITE_DEADLOCK_TIME_SECONDS, no request can ever finish (a rank's threads all wait; the
// per-group detector's assumption too), and hvdlite stops with Status::Deadlock on every rank,
// naming what each rank waits for and which ranks have not submitted it.
//   Twice the time, so that a deadlock inside one group is left to the per-group detector,
//   which fails just those requests and keeps the job going. Here the rounds of the groups
//   involved can never finish (a member never joins them), so every group stops.
//
// The protocol runs on the global set's side channel, by its loop (Controller::check_stalls),
// with rank 0 deciding:
//   Report     a rank stuck for the time -> rank 0: its streak number and what it waits for
//   Confirm    rank 0, holding a report of every rank and stuck itself -> each: still stuck
//              in the streak you reported?
//   Confirmed  the answer (yes / no; a no drops that rank's report until its next streak)
//   Declare    every answer yes -> each: the message (kept: rank_activity.h)
//   Ack        kept
//   Stop       every rank acknowledged -> each: stop every group with the message
// Every report was sent before the confirmation was asked, and each streak began the time
// before its report, so every yes means all ranks were stuck together for the whole time.
// The two last steps let every rank hold the message before any group stops: a group that
// stops because a peer did then fails its requests with the same message, not a bare
// "rank 0 failed".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/rank_activity.h"
#include "transport/transport.h"

namespace hvdlite {

// One group of a rank, as the watch reports it.
struct SetWaits {
  int set_id = 0;
  std::vector<int> ranks;            // global ranks of the members, ascending
  std::vector<std::string> waits;    // names this rank's threads wait for there
  std::vector<std::string> pending;  // names submitted there and not finished (waits included)
};

// The message, given every rank's groups (by global rank): per rank what it waits for, where,
// and which members of that set have not submitted it.
std::string describe_cross_set_deadlock(const std::map<int, std::vector<SetWaits>>& by_rank,
                                        double stuck_s);
std::vector<uint8_t> encode_set_waits(const std::vector<SetWaits>& sets);
std::vector<SetWaits> decode_set_waits(const std::vector<uint8_t>& bytes, size_t at);

class CrossSetDeadlock {
 public:
  using Clock = std::chrono::steady_clock;
  using Describe = std::function<std::vector<SetWaits>()>;    // this rank's groups
  using Stop = std::function<void(const std::string& message)>;  // stop every group

  // world: the global set's transport (its side channel). grace_s:
  // HVDLITE_DEADLOCK_TIME_SECONDS (0: off); the watch declares after twice that.
  CrossSetDeadlock(Transport& world, double grace_s, RankActivity& activity, Describe describe,
                   Stop stop);

  bool enabled() const { return stuck_s_ > 0 && world_.size() > 1; }
  std::chrono::milliseconds poll_interval() const;
  static bool owns(const std::vector<uint8_t>& bytes);
  void on_message(const std::vector<uint8_t>& bytes, int from);
  // The rank's state, and rank 0's decisions: called every poll_interval().
  void poll();

 private:
  void observe(Clock::time_point now);
  double stuck_for(Clock::time_point now) const;
  void send_all(const std::vector<uint8_t>& bytes);
  void decide(Clock::time_point now);  // rank 0

  Transport& world_;
  double stuck_s_;
  RankActivity& activity_;
  Describe describe_;
  Stop stop_;
  bool stopped_ = false;

  // This rank's streak: stuck since `since_`, with the activity counter at `progress_`.
  bool stuck_ = false;
  uint64_t streak_ = 0, progress_ = 0;
  Clock::time_point since_;
  bool reported_ = false;

  // Rank 0's view.
  enum class Phase { Collecting, Confirming, Declaring } phase_ = Phase::Collecting;
  struct Report {
    uint64_t streak = 0;
    std::vector<SetWaits> sets;
  };
  std::map<int, Report> reports_;  // by rank, rank 0's own included while it is stuck
  uint32_t seq_ = 0;
  uint64_t own_streak_ = 0;        // rank 0's streak when it asked
  std::set<int> answered_;         // yes (Confirming) or acknowledged (Declaring)
  std::string message_;
};

}  // namespace hvdlite
