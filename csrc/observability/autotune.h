// Autotune (HVDLITE_AUTOTUNE=1): tunes the fusion threshold, the cycle time, the ring piece
// size, where the topology allows it and HVDLITE_HIERARCHICAL_ALLREDUCE is unset,
// hierarchical all-reduce on/off and, for more than 2 ranks on one host, the shared-memory
// paths (HVDLITE_SHM_ALLREDUCE_MIN_BYTES: the area or the ring; HVDLITE_BOARD_ALLREDUCE_
// MAX_BYTES: how much rides in the negotiation round) unless set to 0 (off stays off), online, during the first steps of training, from the all-reduce throughput the
// engine measures: bytes reduced per second over whole training steps (a step ends each
// time the first tensor seen reappears, so windows never cut a step in two).
//
// The search is a coordinate search over a small grid: each setting in turn tries its
// candidates with the others held at their best so far (a setting with one candidate is
// fixed, not tried). A challenger that beats the incumbent by 3% is measured once more
// against it (this machine's noise is larger than
// most differences) and replaces it only if it still wins on both measurements together.
// A pass that changes nothing means the search has converged; the best values then stay
// (at most kMaxPasses passes). Every trial, confirmation and the final choice go to
// HVDLITE_AUTOTUNE_LOG (CSV).
//
// Rank 0 decides. Its current values travel with every negotiation round: it puts them in
// extra words of the round's bitwise AND and every other rank puts all ones, so the AND
// hands rank 0's values to every rank, which all apply them after that same round.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/message.h"

namespace hvdlite {

class Autotune {
 public:
  // fusion threshold, cycle time (ns), ring piece bytes, hierarchical all-reduce (0/1),
  // shm all-reduce min bytes, board all-reduce max bytes
  static constexpr size_t kWords = 6;

  // config: the live settings the engine reads; the tuner writes them after each round.
  Autotune(Config& config, int rank);
  ~Autotune();
  bool enabled() const { return enabled_; }
  bool converged() const { return converged_.load(); }
  // Before the first round, on every rank alike: whether the group can run hierarchical
  // all-reduce (hierarchical.h). Tuned only when the setting leaves it to the topology.
  void allow_hierarchical(bool available);
  // Likewise: whether the group's ranks (more than 2) share a host's memory, so the
  // shared-memory paths exist to be tried.
  void allow_shared_memory(bool available);

  // This rank's share of the round's words (rank 0: its values; others: all ones).
  void contribute(uint64_t* words);
  // After the round: every rank adopts the values the round carried.
  void apply(const uint64_t* words);
  // Rank 0, after the round's responses ran: measures, and picks the next trial.
  void observe(const std::vector<Response>& responses);

 private:
  using Clock = std::chrono::steady_clock;
  using Values = std::array<uint64_t, kWords>;
  size_t tuned() const;  // the setting being searched (index into Values)
  void next_trial();
  void finish_trial(double score);
  void log_row(const char* kind, const Values& v, double score, int samples);

  Config& config_;
  int rank_;
  bool enabled_;
  std::atomic<bool> converged_{false};
  std::vector<std::vector<uint64_t>> candidates_;  // per setting

  // Rank 0's search state.
  Values best_, proposed_, applied_;
  double best_score_ = 0;
  size_t pass_ = 0, setting_ = 0, candidate_ = 0;  // setting_: position in the search order
  bool changed_in_pass_ = false;
  int trial_ = 0;
  std::vector<std::pair<uint64_t, double>> scores_;  // this setting's candidates so far
  bool confirming_ = false;         // re-measuring incumbent and challenger
  std::array<std::pair<uint64_t, double>, 2> confirm_;  // (value, summed score) of both
  size_t confirmed_ = 0;

  // Measurement (rank 0).
  std::string marker_;                // first all-reduce seen: its return ends a step
  bool measuring_ = false;
  Clock::time_point warm_until_, window_start_;
  uint64_t window_bytes_ = 0;
  std::vector<double> samples_;
  FILE* log_ = nullptr;
};

}  // namespace hvdlite
