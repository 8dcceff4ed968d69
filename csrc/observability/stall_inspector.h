// The stall inspector: finds tensors that some ranks submitted and others have not, and says
// which, by global rank (and which process set, outside the global one). It needs no
// coordinator: a rank whose own requests have waited past the threshold asks every other rank
// over the transport's side channel for its pending names and ages, waits briefly for the
// answers (a frozen or stuck rank gives none, and is said not to answer), and judges:
//   'fc.weight' waited 60 s: ranks 0, 2 submitted it; ranks 1, 3 have not
// The lowest rank that answered and submitted a stalled tensor warns (the others stay quiet),
// so the warning comes at the configured time whichever rank is frozen, rank 0 included.
// Past HVDLITE_STALL_SHUTDOWN_TIME_SECONDS that rank sends the message to every rank, whose
// engine then stops with it as the error of every pending and later collective.
//
// Every rank's engine calls check(), and hands it the side channel's messages, while it
// waits: inside a negotiation round, and every poll_interval() while idle, so that a rank
// with nothing pending still answers.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/tensor_entry.h"
#include "transport/transport.h"
#include "engine/validate.h"

namespace hvdlite {

class StallInspector {
 public:
  // transport: the group's; members: who its ranks are (messages name global ranks).
  StallInspector(Transport& transport, const Config& config, const Membership& members);

  bool enabled() const { return threshold_s_ > 0; }
  std::chrono::milliseconds poll_interval() const;
  // Throws Error(ShutDown, the stall message) when the job must end.
  void check(const EntryList& pending);
  // A message of the side channel (the controller reads it, side_message.h): true for the
  // inspector's own kinds. on_message answers queries with `pending`, collects answers, and
  // throws Error(ShutDown, ...) for the judging rank's stop.
  static bool owns(const std::vector<uint8_t>& bytes);
  void on_message(const std::vector<uint8_t>& bytes, int from, const EntryList& pending);

 private:
  using Clock = std::chrono::steady_clock;
  struct Waiting {
    std::string name;
    double age_s;
  };
  std::vector<Waiting> waiting(const EntryList& pending, Clock::time_point now) const;
  void evaluate(Clock::time_point now);
  double reply_wait_s() const;  // how long a query waits for answers

  Transport& transport_;
  const Config& config_;
  const Membership& members_;
  double threshold_s_;              // the earlier of the check and shutdown times (0: off)
  Clock::time_point last_poll_;
  // This rank's own query, while its requests are stalled.
  bool query_open_ = false;
  uint32_t query_seq_ = 0;
  Clock::time_point query_sent_, last_evaluation_;
  std::map<int, std::vector<Waiting>> replies_;  // by member, this rank's own included
};

}  // namespace hvdlite
