// The timeline: a Chrome trace-event file (chrome://tracing, Perfetto) showing, per tensor,
// where its time went: QUEUE (enqueued, not yet seen by the engine), NEGOTIATE (waiting for
// the other ranks; its args name the ranks that submitted late: on the coordinator path
// rank 0 knows them from the requests, on the cached path the round tells every rank),
// WAIT_FOR_DATA (decided, waiting for its fusion batch), the fusion copy (or the zero-copy
// span, or the 16-bit compression), the ring's reduce-scatter and all-gather (or the three
// stages of a hierarchical all-reduce: within the host, across hosts, within the host) or a
// reduce-scatter's ring, the copy out,
// and completion, all nested in one span per request. Optional cycle markers mark every
// negotiation round; a counter track shows the bytes all-reduced per round.
//
// The engine only builds small event records and hands them to a bounded queue; a writer
// thread formats and writes them every 100 ms. A full queue drops events (the file says how many) rather
// than ever blocking the engine. After every write the file is a complete JSON array, so it
// stays valid when the job is killed.
//
// One timeline per process, reachable from every layer without plumbing: the engine, the
// controller and the executors only call the few trace_* functions below, each of which costs
// one relaxed atomic load while the timeline is off.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "algorithms/hierarchical.h"
#include "engine/message.h"
#include "engine/tensor_entry.h"
#include "engine/validate.h"

namespace hvdlite {

using Clock = std::chrono::steady_clock;

class Timeline {
 public:
  static Timeline& get();
  ~Timeline();

  bool active() const { return active_.load(std::memory_order_relaxed); }
  bool mark_cycles() const { return mark_cycles_.load(std::memory_order_relaxed); }

  // Starts writing to path (replacing a timeline already running). Throws InvalidArgument
  // naming the path when it cannot be created.
  void start(const std::string& path, int rank, bool mark_cycles);
  // Writes what is queued and closes the file. Safe to call when not running.
  void stop();

  // Events. track: the tensor name (one track each) or a fixed track such as "cycles".
  // args: a JSON object's members without braces ("" for none).
  void span(const std::string& track, const char* name, Clock::time_point begin,
            Clock::time_point end, std::string args = "");
  void instant(const std::string& track, const char* name, Clock::time_point at, std::string args = "");
  void counter(const char* name, Clock::time_point at, const char* series, double value);

  // Coordinator only, after each decision: remembers which ranks had each request the first
  // time any rank sent it, so that NEGOTIATE can name the (global) ranks that came late.
  void note_decisions(const std::vector<std::vector<Request>>& requests_by_rank,
                      const std::vector<Response>& decided, const Membership& members);
  // Any rank, for a tensor decided on the cached path (late_ranks.h): these ranks came late.
  void note_late_ranks(const std::string& name, std::vector<int> ranks);
  std::vector<int> take_late_ranks(const std::string& name);

 private:
  Timeline() = default;
  struct Event {
    char phase;             // 'X' span, 'i' instant, 'C' counter
    const char* name;       // string literal
    std::string track;
    int64_t begin_ns, dur_ns;
    std::string args;
  };
  void push(Event e);
  void write_loop();
  std::string format(const std::vector<Event>& events);
  int64_t since_start(Clock::time_point t) const;

  std::atomic<bool> active_{false};
  std::atomic<bool> mark_cycles_{false};
  std::atomic<int64_t> start_ns_{0};  // steady clock at start(), read by the engine's hooks
  std::mutex start_mu_;          // serialises start/stop

  std::mutex mu_;                // guards the queue and the writer's stop flag
  std::condition_variable cv_;
  std::vector<Event> queue_;
  size_t dropped_ = 0;
  bool stopping_ = false;
  std::thread writer_;

  // Writer thread only (set before it starts).
  int fd_ = -1;
  int rank_ = 0;
  int64_t tail_ = 0;             // file offset where the closing "]" is written
  bool first_event_ = true;
  std::unordered_map<std::string, int> tids_;

  std::mutex late_mu_;
  std::unordered_map<std::string, std::vector<int>> first_seen_;  // name -> ranks at first sight
  std::unordered_map<std::string, std::vector<int>> late_;        // name -> ranks that came late
};

// Starts the timeline on this rank if it writes one: rank 0 only (Horovod's behaviour), or
// every rank when all_ranks is set, each to path's stem + "." + rank + path's extension.
void start_timeline_on_rank(const std::string& path, int rank, bool all_ranks, bool mark_cycles);

// Throws InvalidArgument naming the setting when path's directory cannot take the file, so
// that init() fails before the engine starts rather than after.
void check_timeline_path(const std::string& path, const char* setting);

// The engine's hooks (each a no-op while the timeline is off).
// The engine moved the entry from the queue to its pending list.
void trace_drained(TensorEntry& entry);
// The entry's response was decided this round (QUEUE and NEGOTIATE end here).
void trace_negotiated(TensorEntry& entry);
// The entry completed (the request's span, its execution span, and completion).
void trace_completed(TensorEntry& entry, bool ok);
// A negotiation round starts (cycle markers).
void trace_round();

// When a fusion batch ran: start, data packed, reduce-scatter done (flat ring), all-reduce
// done, data unpacked; a hierarchical all-reduce has its stages' ends instead of `scattered`,
// and the exchange and shared-memory all-reduces (no separate halves) none.
struct BatchTimes {
  Clock::time_point start, packed, scattered, reduced, unpacked;
  bool hierarchical = false;
  bool exchange = false;
  bool shared_memory = false;
  bool adasum = false;  // algorithms/adasum.h (Horovod's activity name: MPI_ADASUM_ALLREDUCE)
  HierarchyTimes stages;
};
// One member of a fusion batch; pack_phase names how its data reached the ring.
void trace_fused_member(TensorEntry& entry, const BatchTimes& t, const char* pack_phase,
                        const char* unpack_phase);
void trace_round_bytes(size_t bytes);

// The phases of one request that runs alone (not in a fusion batch), each ending where the
// next begins; they replace its EXECUTE span. A no-op while the timeline is off.
class PhaseTrace {
 public:
  explicit PhaseTrace(TensorEntry& entry);
  // Ends the phase that began at the previous end() (or at construction).
  void end(const char* phase);

 private:
  TensorEntry* entry_ = nullptr;  // null while not traced
  Clock::time_point last_;
};

}  // namespace hvdlite
