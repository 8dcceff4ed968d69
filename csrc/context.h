// Everything one process's hvdlite has: the transport, the request queue, the handles, the
// negotiation controller, the fusion buffers, and the background thread that drives them.
// Framework threads only call enqueue/poll/wait; every transport call happens on the thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "config.h"
#include "controller.h"
#include "fusion.h"
#include "handle.h"
#include "tensor_entry.h"
#include "transport/transport.h"

namespace hvdlite {

class Context {
 public:
  Context(std::unique_ptr<Transport> transport, Config config);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Topology& topology() const { return transport_->topology(); }
  const Config& config() const { return config_; }

  // Queues the entries together (so a group negotiates in one round) and returns their
  // handles. Throws InvalidArgument for a name already in flight, ShutDown once stopped.
  std::vector<int64_t> enqueue(EntryList entries);
  bool poll(int64_t handle) { return handles_.poll(handle); }
  Outcome wait(int64_t handle) { return handles_.wait(handle); }

  // Stops the engine on every rank (the first rank to ask decides; others' pending requests
  // fail with ShutDown). Returns when this rank's background thread has ended.
  void shutdown();
  void abort(int code) { transport_->abort(code); }
  TransportStats& transport_stats() { return transport_->stats(); }

 private:
  // engine.cc: the background loop.
  void run_loop();
  void execute(const std::vector<Response>& responses);
  void complete(TensorEntry* entry, Outcome outcome);
  void stop(Status status, const std::string& reason);

  std::unique_ptr<Transport> transport_;
  Config config_;
  HandleTable handles_;
  Controller controller_;
  AllreduceExecutor allreduce_;

  std::mutex mu_;
  std::condition_variable cv_;
  EntryList queue_;                          // guarded by mu_: enqueued, not yet seen by the loop
  std::unordered_set<std::string> in_flight_;  // guarded by mu_: names not yet completed
  bool shutdown_requested_ = false;          // guarded by mu_
  std::atomic<bool> work_queued_{false};     // set with queue_/shutdown, read without the lock
  bool stopped_ = false;                     // guarded by mu_
  Status stop_status_ = Status::ShutDown;    // guarded by mu_
  std::string stop_reason_;                  // guarded by mu_

  EntryList pending_;                        // loop thread only
  std::vector<uint8_t> work_, scratch_;      // loop thread only (reducescatter buffers)
  std::thread thread_;
};

}  // namespace hvdlite
