// One communicator and everything that negotiates and runs collectives over it: its
// transport, the controller with its response cache, the executors, and the loop thread
// that drives them (drain queue -> negotiate -> execute -> complete). The global set is
// group 0; every process set is another group over a split of the global transport.
//
// Each group has its own loop thread, so a collective that blocks in one set (waiting for a
// slow member, or moving data) never holds up another: sets proceed independently, and two
// sets that share ranks cannot deadlock by running their collectives in different orders.
//
// Rounds are run by whichever thread holds the group's driver token: the loop thread, or a
// caller that waits for its own request while the loop is idle (help()). A caller driving
// saves two thread handoffs per collective, which on a machine with few cores is most of a
// small all-reduce's cost. The token serialises every transport call and all round state.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/config.h"
#include "engine/controller.h"
#include "engine/cross_set_deadlock.h"
#include "engine/deadline.h"
#include "engine/device_collectives.h"
#include "engine/fusion.h"
#include "algorithms/hierarchical.h"
#include "engine/handle.h"
#include "engine/recycled_nodes.h"
#include "engine/tensor_entry.h"
#include "transport/transport.h"
#include "engine/validate.h"

namespace hvdlite {

class Group {
 public:
  // Runs on the loop thread for AddProcessSet / RemoveProcessSet responses (global set only).
  using AdminHandler = std::function<Outcome(const Response&)>;
  // Runs on the loop thread once, when the loop has ended.
  using OnExit = std::function<void()>;

  // The global set's group also runs the cross-set deadlock watch with these (engine.cc).
  struct CrossSetWatch {
    CrossSetDeadlock::Describe describe;
    CrossSetDeadlock::Stop stop;
  };

  Group(Membership members, std::unique_ptr<Transport> transport, const Config& config,
        HandleTable& handles, AdminHandler admin = nullptr, OnExit on_exit = nullptr,
        CrossSetWatch cross_set = {});
  ~Group();  // stop()
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int id() const { return members_.set_id; }
  const Membership& members() const { return members_; }
  Transport& transport() { return *transport_; }
  // True when this group's all-reduce runs in intra-/cross-host stages (hierarchical.h);
  // under autotune: when it may (the tuner switches between them and the flat ring).
  bool hierarchical() const { return hierarchy_ != nullptr; }

  // Queues the entries together (so a group negotiates in one round) and returns their
  // handles. Throws InvalidArgument for a name already in flight in this group, and the
  // group's stop status once it has stopped. wake=false does not wake the loop thread: the
  // caller promises to wait for a handle at once, and help() runs the rounds then (the loop
  // still takes such entries on its next round, or its next periodic wake-up).
  std::vector<int64_t> enqueue(EntryList entries, bool wake = true);

  // Runs rounds on the calling thread until `handle` (one of this group's) completes or
  // `leave_at` passes, provided no other thread is running them; otherwise makes sure the
  // loop thread will. A round whose peers have not answered by `leave_at` is left to the loop
  // thread (Controller::negotiate), so that the caller can look at its signals. `enough`, when
  // given, is also asked after each round: true ends the help (a watcher of several handles).
  void help(int64_t handle, const Deadline& leave_at = Deadline::never(),
            const std::function<bool()>& enough = nullptr);

  // A thread blocks waiting on `handle` (one of this group's) from begin_wait until end_wait:
  // the deadlock detector counts the rank as blocked meanwhile (deadlock.h).
  void begin_wait(int64_t handle);
  void end_wait(int64_t handle);
  // What this rank waits for and has pending here, for the cross-set deadlock watch.
  SetWaits waits();

  // Stops the loop on every member: pending requests fail with ShutDown and `reason` here,
  // and on the others with a message naming the ranks that asked (also here when `reason` is
  // empty). request_stop returns at once; join waits for this rank's loop to end (from any
  // number of threads); stop does both.
  void request_stop(const std::string& reason = "");
  // The same because something failed on this rank (NCCL's asynchronous error): requests fail
  // with `status` and `reason` here, and with Internal naming this rank on the others.
  void request_failure_stop(Status status, const std::string& reason);
  void join();
  void stop(const std::string& reason = "") {
    request_stop(reason);
    join();
  }

 private:
  // group.cc: the loop and what it runs.
  void run_loop();
  // One round (drain the queue, negotiate, execute), by the holder of the driver token.
  // False once the group has ended (shut down, or an error stopped it).
  // caller: run by a waiting caller (help()), which may poll longer for its peers.
  bool run_round(bool caller = false, const Deadline* leave_at = nullptr);
  // After a round that declared a deadlock: fails every request a thread waits on here, with
  // the members' agreed description, unless only other members fell behind (Note [the ranks
  // that fell behind] in deadlock.h). Collective (Controller::agree_on_deadlock).
  void fail_waited_for();
  // The stall inspector's turn while idle, by the token's holder. False once it ended the
  // group (a stall past HVDLITE_STALL_SHUTDOWN_TIME_SECONDS).
  bool check_stalls_idle();
  // Gives the token back; wakes the loop thread when rounds are left to run.
  void release_driver();
  void execute(const std::vector<Response>& responses);
  // The round just ended failed requests on every member (an error response, a deadlock),
  // whether or not this member had them (a joined rank): every outcome completed from now on
  // carries that round (Outcome::agreed_round).
  void note_agreed_failure();
  // Completes the request; the outcome carries this set and the last agreed failure.
  void complete(TensorEntry* entry, Outcome outcome);
  void fail_pending(Status status, const std::string& reason);

  Membership members_;
  std::unique_ptr<Transport> transport_;
  std::atomic<int64_t> last_agreed_failure_{-1};  // the round (note_agreed_failure)
  // A deadlock failed only the requests of the members that fell behind: the next round that
  // runs something is the agreed failure the set's numbering starts over at (deadlock.h).
  bool restart_names_at_next_run_ = false;
  Config config_;  // this group's own copy: autotune (group 0 only) changes it as it runs
  HandleTable& handles_;
  AdminHandler admin_;
  OnExit on_exit_;
  Controller controller_;
  std::unique_ptr<Hierarchy> hierarchy_;  // intra-/cross-host stages, when used
  AllreduceExecutor allreduce_;
  // Collectives of CUDA tensors over NCCL: made at the first such response (every member
  // meets it at the same point of the same order; the communicator is created there).
  std::unique_ptr<DeviceCollectives> device_;
  DeviceCollectives* device_collectives();

  std::mutex mu_;
  std::condition_variable cv_;
  EntryList queue_;                            // guarded by mu_: enqueued, not yet seen by the loop
  // guarded by mu_: names not yet completed, and their handles
  std::unordered_map<std::string, int64_t> in_flight_;
  RecycledNodes<std::unordered_map<std::string, int64_t>> in_flight_recycled_;  // guarded by mu_
  bool stop_requested_ = false;                // guarded by mu_
  std::string stop_reason_;                    // guarded by mu_: why pending requests fail
  Status failure_status_ = Status::Success;    // guarded by mu_: request_failure_stop's
  std::atomic<bool> work_queued_{false};       // set with queue_/stop, read without the lock
  bool driving_ = false;                       // guarded by mu_: some thread is running rounds
  std::unordered_map<int64_t, int> waited_;    // guarded by mu_: handle -> threads waiting on it
  bool stopped_ = false;                       // guarded by mu_
  Status stop_status_ = Status::ShutDown;      // guarded by mu_

  // The driver token's holder only (controller_ and allreduce_ likewise). Read under mu_
  // by a thread about to take the token: the last holder wrote it before releasing mu_.
  EntryList pending_;
  std::vector<uint8_t> work_, scratch_;        // reducescatter buffers
  std::thread thread_;
  std::mutex join_mu_;  // join() may be called by several threads (shutdown, group 0's exit)
};

}  // namespace hvdlite
