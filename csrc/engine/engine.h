// One process's hvdlite: the handle table every request completes through, and the table of
// process sets with the Group (communicator, controller, executors, loop thread) of each set
// this rank belongs to. The global set is group 0 and always exists. Framework threads call
// enqueue / poll / wait and the process-set queries; the groups' threads do all the rest.
//
// Adding and removing a set is collective over the global set: the change travels as a
// request negotiated in group 0, so every rank applies it at the same point of the same order
// (on group 0's thread) and every rank gets the same id. Ids of removed sets are reused
// first-freed first, as in Horovod.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/config.h"
#include "engine/group.h"
#include "engine/handle.h"
#include "engine/tensor_entry.h"
#include "transport/transport.h"

namespace hvdlite {

class Engine {
 public:
  Engine(std::unique_ptr<Transport> world, Config config);
  ~Engine();  // shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Topology& topology() const { return topology_; }
  const Config& config() const { return config_; }

  // Queues the entries in process set `process_set` and returns their handles. Throws
  // InvalidArgument when the set does not exist or this rank is not one of its members.
  // wake=false leaves the set's loop thread asleep: for a caller that waits at once, which
  // then runs the rounds itself (Group::enqueue).
  std::vector<int64_t> enqueue(int process_set, EntryList entries, bool wake = true);
  bool poll(int64_t handle) { return handles_.poll(handle); }
  // Runs the owning set's rounds on this thread while no other thread does (Group::help),
  // then returns the outcome.
  Outcome wait(int64_t handle);
  // wait() until `until` at most: nothing when the request has not finished by then (it stays
  // in flight; wait again later). For callers that must look at something else now and then
  // (Python's signal handlers): Note [interruptible waits] in bindings.cc.
  std::optional<Outcome> wait_until(int64_t handle, const Deadline& until);
  std::optional<Outcome> wait_until(int64_t handle, std::chrono::steady_clock::time_point until) {
    return wait_until(handle, Deadline::at(until));
  }

  // While alive, the deadlock detector counts this rank as blocked on `handle` in its set
  // (deadlock.h). Engine::wait holds one; so do callers that wait in slices (wait_until).
  class Blocked {
   public:
    Blocked(Engine& engine, int64_t handle);
    ~Blocked();
    Blocked(const Blocked&) = delete;
    Blocked& operator=(const Blocked&) = delete;

   private:
    std::shared_ptr<Group> group_;
    int64_t handle_;
  };

  // Watched handles (Note [watched handles] in handle.h), for a thread that completes
  // futures. The rank counts as blocked on each (deadlock.h) from watch() until
  // next_watched() returns it, as it does while a thread waits on it; and next_watched()
  // runs the rounds of the oldest one's set while no other thread does, as wait() would.
  void watch(int64_t handle);
  std::optional<int64_t> next_watched(std::chrono::steady_clock::time_point until);

  // Stops every group on every rank (the first rank to ask decides; others' pending requests
  // fail with ShutDown). Returns when this rank's loops have ended.
  void shutdown();
  void abort(int code) { world_->transport().abort(code); }
  // Bytes this process sent and received, in every group.
  TransportStats& transport_stats() { return world_->transport().stats(); }
  // Whether the global set's all-reduce is hierarchical: the setting and the topology decide.
  bool hierarchical_allreduce() const { return world_->hierarchical(); }

  // Elastic recovery, after a request failed with Status::RanksLost. Collective over the
  // surviving ranks, each calling it once: stops this engine (its pending requests fail),
  // shrinks the world to the survivors (in their old order) and returns a new engine over
  // them, with a fresh negotiation cache, fusion buffers and topology, and every process set
  // kept under its id with its surviving members renumbered (a set with none left is removed).
  // `lost` receives the ranks that are gone, in this engine's numbering.
  std::shared_ptr<Engine> rebuild(std::vector<int>* lost);
  // Elastic resizing (hosts added or removed): collective over every rank. Stops this engine;
  // the ranks in `leaving` get null, the others a new engine over themselves (old order) and
  // one new rank per entry of `add`, started with `command` (see Transport::regroup). Process
  // sets are kept as by rebuild; adding ranks to a job that has any is InvalidArgument (before
  // anything is stopped, on every rank alike).
  std::shared_ptr<Engine> regroup(const std::vector<int>& leaving,
                                  const std::vector<std::string>& command,
                                  const std::vector<Transport::NewProcess>& add);

  // How add/remove_process_set wait for their request: Engine::wait unless the caller must
  // look at something else meanwhile (bindings.cc: Python's signal handlers).
  using Waiter = std::function<Outcome(int64_t handle)>;
  // Collective over the global set. `ranks` are global ranks, sorted and distinct. Throws
  // InvalidArgument (on every rank) when a set with the same ranks exists, and Mismatch when
  // the ranks passed differ across ranks.
  int add_process_set(const std::vector<int>& ranks, const Waiter& wait = nullptr);
  // Collective over the global set. False when no set has this id (or it is the global set).
  bool remove_process_set(int id, const Waiter& wait = nullptr);
  // The add/remove requests are named in call order, 'hvdlite.<op>.<n>'; after a failure of
  // the global set agreed in `round` they are numbered afresh, 'hvdlite.<op>.r<round>.<n>'
  // (Note [unnamed names after a failure] in src/hvdlite/policy/names.py).
  void restart_change_numbering(int64_t round);

  struct ProcessSetInfo {
    std::vector<int> ranks;  // global ranks of the members
    int rank = -1;           // this rank's position among them, -1 when not a member
  };
  // Throws InvalidArgument when no set has this id.
  ProcessSetInfo process_set(int id) const;
  std::vector<int> process_set_ids() const;
  // The user point-to-point channel of a set this rank is in (peer_channel.h): not negotiated,
  // so it never goes through the set's loop. Throws InvalidArgument for an unknown set, a set
  // this rank is not in, or a transport without one. `what` names the call in errors.
  std::shared_ptr<PeerChannel> peer_channel(int id, const std::string& what) const;

 private:
  struct SetTable {
    std::map<int, std::vector<int>> ranks;  // id -> global ranks, the global set excluded
    std::deque<int> free_ids;
    int next_id = 1;
  };
  // A world with process sets already defined (rebuild): each set this rank is in gets its
  // group over a split of `world`, made here, in id order, on every rank alike.
  Engine(std::unique_ptr<Transport> world, Config config, const SetTable& sets);
  // The engine over `world` after the ranks `gone` (sorted, old numbering) left this one.
  std::shared_ptr<Engine> successor(std::unique_ptr<Transport> world, const std::vector<int>& gone);

  // Both run on group 0's loop thread.
  Outcome apply_change(const Response& r);
  void stop_process_sets();
  // The cross-set deadlock watch's view of this rank, and its verdict (cross_set_deadlock.h):
  // on group 0's thread too.
  std::vector<SetWaits> set_waits();
  void stop_for_deadlock(const std::string& message);
  std::vector<std::shared_ptr<Group>> all_groups();  // this rank's, the global set's included

  int64_t submit_change(OpType op, std::vector<int64_t> shape, int32_t root);
  std::string unknown_set(int id) const;  // needs sets_mu_ held
  std::shared_ptr<Group> group_of(int set_id);      // null for an unknown set (or -1)
  std::shared_ptr<Group> owner_of(int64_t handle);  // null for an unknown handle
  // The same without a reference count for the global set's group (the engine's own); `keep`
  // holds any other set's group alive for the caller.
  Group* owner_of(int64_t handle, std::shared_ptr<Group>& keep);

  Config config_;
  HandleTable handles_;
  std::mutex watched_mu_;
  std::map<int64_t, std::unique_ptr<Blocked>> watched_;  // guarded by watched_mu_; oldest first
  Topology topology_;

  mutable std::mutex sets_mu_;
  std::map<int, std::vector<int>> set_ranks_;     // guarded: every set, member or not
  std::map<int, std::shared_ptr<Group>> groups_;  // guarded: the sets this rank is in
  std::deque<int> free_ids_;                      // guarded: removed ids, reused oldest first
  int next_id_ = 1;                               // guarded
  std::mutex changes_mu_;
  std::string changes_prefix_;                    // guarded by changes_mu_: "" or "r<round>."
  int64_t changes_ = 0;                           // guarded by changes_mu_: names add/remove

  std::shared_ptr<Group> world_;  // set last: its thread may call back into the tables
};

}  // namespace hvdlite
