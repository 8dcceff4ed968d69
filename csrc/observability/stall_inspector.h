// The stall inspector: finds tensors that some ranks submitted and others have not, and says
// which, by global rank (and which process set, outside the global one). A rank whose requests have waited longer than the check time tells the coordinator
// (rank 0) over the transport's side channel; rank 0 then asks every rank for its pending
// names and ages and, with every answer in, warns:
//   'fc.weight' waited 60 s: ranks 0, 2 submitted it; ranks 1, 3 have not
// Past HVDLITE_STALL_SHUTDOWN_TIME_SECONDS it sends that message to every rank, whose engine
// then stops with it as the error of every pending and later collective.
//
// Every rank's engine calls check() while it waits: inside a negotiation round, and every
// poll_interval() while idle, so that a rank with nothing pending still answers.
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

 private:
  using Clock = std::chrono::steady_clock;
  struct Waiting {
    std::string name;
    double age_s;
  };
  std::vector<Waiting> waiting(const EntryList& pending, Clock::time_point now) const;
  void on_message(const std::vector<uint8_t>& bytes, int from, const EntryList& pending,
                  Clock::time_point now);
  void evaluate(Clock::time_point now);

  Transport& transport_;
  const Config& config_;
  const Membership& members_;
  double threshold_s_;              // the earlier of the check and shutdown times (0: off)
  Clock::time_point last_poll_, last_report_;
  // Coordinator only.
  bool stall_reported_ = false;
  bool query_open_ = false;
  uint32_t query_seq_ = 0;
  Clock::time_point query_sent_, last_evaluation_;
  std::map<int, std::vector<Waiting>> replies_;
};

}  // namespace hvdlite
