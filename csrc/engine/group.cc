// A group's rounds: drain queue -> negotiate -> execute (fusing all-reduces) -> complete.
// The loop thread never sleeps on a fixed cycle: with no work it blocks on a condition
// variable, and with work it is always inside a negotiation round (see
// Controller::wait_for_round). A waiting caller may run the rounds instead (help()).
#include "engine/group.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "algorithms/collectives.h"
#include "algorithms/shm_collectives_nranks.h"
#include "engine/rank_computing.h"
#include "observability/timeline.h"
#include "transport/peer_channel.h"

namespace hvdlite {
namespace {

// Why pending requests fail when the members stopped the group, naming who asked.
std::string stop_message(const Membership& members, const std::vector<int>& who) {
  std::string ranks = who.size() > 1 ? "ranks " : "rank ";
  for (size_t i = 0; i < who.size(); ++i) ranks += (i ? ", " : "") + std::to_string(members.global(who[i]));
  if (members.set_id == 0) {
    return "hvdlite has been shut down: " + ranks + " called hvdlite.shutdown() or exited while "
           "this request was pending; every rank must submit the same collectives before "
           "shutting down";
  }
  return members.name() + " has stopped: " + ranks + " shut hvdlite down (or exited) or removed "
         "the set while this request was pending; every member must submit the same "
         "collectives before either";
}

// Why pending requests fail when a member stopped because something failed there.
std::string failure_message(const Membership& members, const std::vector<int>& who) {
  std::string ranks = who.size() > 1 ? "ranks " : "rank ";
  for (size_t i = 0; i < who.size(); ++i) ranks += (i ? ", " : "") + std::to_string(members.global(who[i]));
  return "hvdlite stopped" + members.where() + ": " + ranks + " stopped after a failure there "
         "(NCCL's asynchronous error: its message is on that rank); this rank's NCCL communicator "
         "was aborted too. In an elastic job, hvdlite is rebuilt with fresh communicators";
}

// The settings a group runs with. Autotune tunes the global set only: its rank 0 writes the
// log, and a set's traffic says little about the whole job's.
Config own_config(const Config& config, const Membership& members) {
  Config c = config;
  if (members.set_id != 0) c.autotune = false;
  return c;
}

}  // namespace

Group::Group(Membership members, std::unique_ptr<Transport> transport, const Config& config,
             HandleTable& handles, AdminHandler admin, OnExit on_exit, CrossSetWatch cross_set)
    : members_(std::move(members)),
      transport_(std::move(transport)),
      config_(own_config(config, members_)),
      handles_(handles),
      admin_(std::move(admin)),
      on_exit_(std::move(on_exit)),
      controller_(*transport_, config_, members_),
      allreduce_(*transport_, config_,
                 [this](TensorEntry* e, Outcome o) { complete(e, std::move(o)); }) {
  controller_.check_settings_agree();  // before the thread: a mismatch fails init() itself
  hierarchy_ = make_hierarchy(*transport_, config_);
  controller_.allow_hierarchical(hierarchy_ != nullptr);  // autotune may switch it off and on
  controller_.allow_shared_memory(shm_collectives_nranks_available(*transport_));
  allreduce_.use_hierarchy(hierarchy_.get());
  if (cross_set.describe) {
    controller_.watch_cross_set_deadlocks(handles_.activity(), std::move(cross_set.describe),
                                          std::move(cross_set.stop));
  }
  thread_ = std::thread([this] { run_loop(); });
}

Group::~Group() {
  stop();
  device_.reset();  // its watchdog calls request_stop(): gone before the members it uses
}

std::vector<int64_t> Group::enqueue(EntryList entries, bool wake) {
  std::vector<int64_t> handles;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopped_) throw Error(stop_status_, stop_reason_);
    std::unordered_set<std::string> batch;
    for (auto& e : entries) {
      const std::string& name = e->request.name;
      if (in_flight_.count(name) || (entries.size() > 1 && !batch.insert(name).second)) {
        throw Error(Status::InvalidArgument,
                    "a " + std::string(op_name(e->request.op)) + " named '" + name +
                    "' is already in flight on rank " + std::to_string(members_.global(transport_->rank())) +
                    members_.where() + ": names must be unique among outstanding requests "
                    "(synchronize the earlier one first, or pass a different name)");
      }
    }
    for (auto& e : entries) {
      e->request.process_set = members_.set_id;
      e->request.rank = transport_->rank();
      e->handle = handles_.create(members_.set_id);
      handles.push_back(e->handle);
      in_flight_recycled_.insert(in_flight_, e->request.name, e->handle);  // Note [recycled map nodes]
      queue_.push_back(std::move(e));
    }
    if (!wake) return handles;
    work_queued_ = true;
  }
  cv_.notify_one();
  return handles;
}

void Group::begin_wait(int64_t handle) {
  handles_.activity().begin_wait();
  std::lock_guard<std::mutex> lk(mu_);
  ++waited_[handle];
}

void Group::end_wait(int64_t handle) {
  handles_.activity().end_wait();
  std::lock_guard<std::mutex> lk(mu_);
  auto it = waited_.find(handle);
  if (it != waited_.end() && --it->second == 0) waited_.erase(it);
}

SetWaits Group::waits() {
  SetWaits out;
  out.set_id = members_.set_id;
  for (int m = 0; m < transport_->size(); ++m) out.ranks.push_back(members_.global(m));
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& [name, handle] : in_flight_) {
    out.pending.push_back(name);
    if (waited_.count(handle)) out.waits.push_back(name);
  }
  std::sort(out.pending.begin(), out.pending.end());
  std::sort(out.waits.begin(), out.waits.end());
  return out;
}

void Group::help(int64_t handle, const Deadline& leave_at, const std::function<bool()>& enough) {
  bool mine = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!driving_ && !stopped_) {
      driving_ = mine = true;
    } else if (!queue_.empty() && !work_queued_) {
      // The holder drains the queue each round; make sure a round follows for entries
      // enqueued without waking the loop.
      work_queued_ = true;
    }
  }
  if (!mine) {
    cv_.notify_one();
    return;
  }
  auto done = [&] {
    try {
      return handles_.poll(handle);
    } catch (const Error&) {
      return true;  // waited for by another thread meanwhile: nothing left to drive for
    }
  };
  // The first round runs whatever the time (its caller just set leave_at ahead): a round
  // that finishes the request then costs no clock read here.
  bool alive = true, first = true;
  while (alive && !done() && !(enough && enough()) &&
         (first || std::chrono::steady_clock::now() < leave_at.when())) {
    first = false;
    alive = run_round(/*caller=*/true, &leave_at);
  }
  release_driver();
}

void Group::release_driver() {
  bool more;
  {
    std::lock_guard<std::mutex> lk(mu_);
    driving_ = false;
    more = stopped_ || work_queued_ || !pending_.empty();
  }
  if (more) cv_.notify_one();
}

void Group::request_stop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!stop_requested_) {
      stop_requested_ = true;
      stop_reason_ = reason;
    }
    work_queued_ = true;
  }
  cv_.notify_one();
}

void Group::request_failure_stop(Status status, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!stop_requested_) {
      stop_requested_ = true;
      stop_reason_ = reason;
      failure_status_ = status;
    }
    work_queued_ = true;
  }
  cv_.notify_one();
}

void Group::join() {
  std::lock_guard<std::mutex> lk(join_mu_);
  if (thread_.joinable()) thread_.join();
}

void Group::complete(TensorEntry* entry, Outcome outcome) {
  entry->done = true;
  outcome.agreed_set = members_.set_id;
  outcome.agreed_round = last_agreed_failure_.load(std::memory_order_relaxed);
  if (entry->device) {
    try {
      entry->device->after(outcome.status == Status::Success);
    } catch (const Error& e) {
      outcome = Outcome{e.status(), "tensor '" + entry->request.name + "': " + e.what()};
    }
  }
  trace_completed(*entry, outcome.status == Status::Success);
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = in_flight_.find(entry->request.name);
    if (it != in_flight_.end()) in_flight_recycled_.erase(in_flight_, it);
  }
  handles_.complete(entry->handle, std::move(outcome));
}

void Group::run_loop() {
  HvdliteThread::mark_for_life();  // Note [computing ranks]
  bool busy = false;  // this thread's last round left requests pending
  while (true) {
    if (!busy) {
      // Work tends to follow work (the next gradient of a backward pass, the next step of
      // a loop): look for it briefly before sleeping on the condition variable.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
      while (!work_queued_ && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    }
    {
      std::unique_lock<std::mutex> lk(mu_);
      auto runnable = [&] {
        return stopped_ || (!driving_ && (work_queued_ || !pending_.empty() || stop_requested_));
      };
      // Idle: wake now and then so the stall inspector can answer and warn, and so entries
      // whose caller never came to drive them (enqueue(wake=false)) are not left behind.
      while (!cv_.wait_for(lk, controller_.stall_poll_interval(), runnable)) {
        if (driving_) continue;
        if (!queue_.empty()) {
          work_queued_ = true;
          break;
        }
        driving_ = true;
        lk.unlock();
        const bool alive = check_stalls_idle();
        lk.lock();
        driving_ = false;
        if (!alive) break;
      }
      if (stopped_) break;
      driving_ = true;
    }
    const bool alive = run_round();
    busy = !pending_.empty();
    release_driver();
    if (!alive) break;
  }
  if (on_exit_) on_exit_();
}

bool Group::check_stalls_idle() {
  try {
    controller_.check_stalls(pending_);
    return true;
  } catch (const Error& e) {  // the stall inspector ended the job
    fail_pending(e.status(), std::string("hvdlite stopped: ") + e.what());
  } catch (const std::exception& e) {
    fail_pending(Status::Internal, std::string("hvdlite stopped: ") + e.what());
  }
  return false;
}

bool Group::run_round(bool caller, const Deadline* leave_at) {
  // Point-to-point moves while a thread waits on a collective (Note [point-to-point progress]).
  PeerChannel::progress_all();
  RoundOptions options;
  options.patient = caller;
  options.leave_at = leave_at;
  bool stop_requested;
  Status failure = Status::Success;
  size_t drained = 0;  // entries moved from the queue to pending_ in this call
  const bool open = controller_.round_open();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!open) {  // an open round's pending list must stay as it began (Controller::negotiate)
      for (auto& e : queue_) {
        trace_drained(*e);
        pending_.push_back(std::move(e));
      }
      drained = queue_.size();
      queue_.clear();
    }
    work_queued_ = stop_requested_ || !queue_.empty();
    stop_requested = stop_requested_;
    failure = failure_status_;
    options.failed = failure != Status::Success;
    for (size_t i = 0; !waited_.empty() && config_.deadlock_s > 0 && i < pending_.size(); ++i) {
      if (waited_.count(pending_[i]->handle)) {
        options.blocked = true;
        break;
      }
    }
  }
  // Not while another thread computes (Note [computing ranks]).
  if (options.blocked && rank_computing(config_.deadlock_s)) options.blocked = false;
  try {
    // GPU tensors: their staging copies must have landed before negotiation may pack them.
    // A piecewise staging is waited for by whoever reads it (the all-reduce, piece by piece).
    for (size_t i = pending_.size() - drained; i < pending_.size(); ++i) {
      if (pending_[i]->device && !pending_[i]->device->piecewise()) pending_[i]->device->before_read();
    }
    if (!open) trace_round();
    std::optional<RoundOutcome> outcome = controller_.negotiate(pending_, stop_requested, options);
    if (!outcome) return true;  // left open: the next holder of the token finishes it
    RoundOutcome& round = *outcome;
    if (restart_names_at_next_run_ && (!round.responses.empty() || round.prereduced)) {
      note_agreed_failure();  // Note [the ranks that fell behind] in deadlock.h
      restart_names_at_next_run_ = false;
    }
    if (!round.prereduced) {
      execute(round.responses);
    } else {
      for (TensorEntry* e : *round.prereduced) trace_negotiated(*e);
      allreduce_.complete_prereduced(*round.prereduced, round.reduced);
      pending_.clear();  // a merged round held every pending entry (controller.h)
    }
    if (round.deadlock) fail_waited_for();
    if (round.shutdown) {
      std::string reason;
      {
        std::lock_guard<std::mutex> lk(mu_);
        reason = stop_reason_;
      }
      // After a deadlock across sets every group stops for it, whoever stopped it first
      // (cross_set_deadlock.h): a peer, this rank, or group 0 ending the sets as it ends.
      const std::optional<std::string> deadlock = handles_.activity().deadlock();
      if (deadlock) {
        fail_pending(Status::Deadlock, *deadlock);
      } else if (failure != Status::Success) {
        fail_pending(failure, reason);
      } else if (round.failure) {
        fail_pending(Status::Internal, failure_message(members_, round.shutdown_ranks));
      } else {
        fail_pending(Status::ShutDown, reason.empty() ? stop_message(members_, round.shutdown_ranks) : reason);
      }
      return false;
    }
  } catch (const Error& e) {
    fail_pending(e.status(), std::string("hvdlite stopped: ") + e.what());
    return false;
  } catch (const std::exception& e) {
    fail_pending(Status::Internal, std::string("hvdlite stopped: ") + e.what());
    return false;
  }
  return true;
}

void Group::execute(const std::vector<Response>& responses) {
  if (responses.empty()) return;
  // Every member gets the same responses: an error among them is a failure they all agree
  // on, also where this member has no request of that name (a joined rank).
  if (std::any_of(responses.begin(), responses.end(), [](const Response& r) { return !r.ok(); })) {
    note_agreed_failure();
  }
  const RankActivity::Executing executing(handles_.activity());
  std::unordered_map<std::string, TensorEntry*> by_name;
  TensorEntry* join_entry = nullptr;
  for (auto& e : pending_) {
    if (e->request.op == OpType::Join) join_entry = e.get();
    else by_name[e->request.name] = e.get();
  }
  Transport& t = *transport_;
  const bool shm = config_.shm_collectives && shm_collectives_available(t);
  for (const Response& r : responses) {
    TensorEntry* e = nullptr;
    if (r.op == OpType::Join) {
      e = join_entry;
    } else {
      auto it = by_name.find(r.name);
      if (it != by_name.end()) e = it->second;
    }
    if (e) trace_negotiated(*e);
    if (!r.ok()) {
      if (e) complete(e, Outcome{r.error_status, r.error});
      continue;
    }
    if (config_.debug) {
      std::fprintf(stderr, "[hvdlite rank %d] run %s '%s'%s\n", members_.global(t.rank()),
                   op_name(r.op), r.name.c_str(), members_.where().c_str());
    }
    if (r.nccl) {
      if (DeviceCollectives* device = device_collectives()) {
        device->add(r, e);
      } else if (e) {
        complete(e, Outcome{Status::Internal, "tensor '" + r.name + "' goes through NCCL, but "
                            "this process has no device collectives (hvdlite's module not loaded?)"});
      }
      continue;
    }
    switch (r.op) {
      case OpType::Allreduce:
        allreduce_.add(r, e);  // e is null on a joined rank: it contributes zeros
        break;
      case OpType::Broadcast:
        if (e) {
          // Roots are global ranks (as in Horovod); the transport counts members.
          Response local = r;
          for (int m = 0; m < t.size(); ++m) {
            if (members_.global(m) == r.root) local.root = m;
          }
          complete(e, run_broadcast(t, local, *e, shm));
        }
        break;
      case OpType::Allgather:
        if (e) complete(e, run_allgather(t, r, *e, members_, shm));
        break;
      case OpType::Alltoall:
        if (e) complete(e, run_alltoall(t, r, *e, members_));
        break;
      case OpType::Reducescatter:
        if (e) {
          complete(e, run_reducescatter(t, r, *e, work_, scratch_, config_.ring_piece_bytes,
                                        members_, shm));
        }
        break;
      case OpType::Barrier:
        // Negotiation already proved every member reached it.
        if (e) complete(e, Outcome{});
        break;
      case OpType::Join: {
        Outcome o;
        o.last_joined_rank = r.last_joined_rank;
        if (e) complete(e, std::move(o));
        break;
      }
      case OpType::AddProcessSet:
      case OpType::RemoveProcessSet: {
        // Every rank applies the change at this point of the agreed order.
        Outcome o = admin_ ? admin_(r)
                           : Outcome{Status::InvalidArgument,
                                     std::string(op_name(r.op)) + " is only possible in the global process set"};
        if (e) complete(e, std::move(o));
        break;
      }
    }
  }
  allreduce_.flush();
  if (device_) device_->flush();
  EntryList still;
  for (auto& e : pending_) {
    if (!e->done) still.push_back(std::move(e));
  }
  pending_.swap(still);
}

DeviceCollectives* Group::device_collectives() {
  if (!device_) {
    device_ = make_device_collectives(
        *transport_, members_, DeviceStages{&config_, hierarchy_.get()}, [this](TensorEntry* e, Outcome o) { complete(e, std::move(o)); },
        [this](const std::string& reason) { request_failure_stop(Status::Internal, reason); });
  }
  return device_.get();
}

void Group::note_agreed_failure() {
  last_agreed_failure_.store(controller_.rounds(), std::memory_order_relaxed);
}

void Group::fail_waited_for() {
  RankWaits mine;
  std::vector<TensorEntry*> waited;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& e : pending_) {
      if (e->done) continue;
      mine.pending.push_back(e->request.name);
      if (waited_.count(e->handle)) {
        mine.waits.push_back(e->request.name);
        waited.push_back(e.get());
        mine.waited_s = std::max(mine.waited_s, std::chrono::duration<double>(now - e->enqueued).count());
      }
    }
  }
  const Controller::DeadlockVerdict verdict = controller_.agree_on_deadlock(mine);
  if (verdict.everyone) {
    note_agreed_failure();
  } else {
    restart_names_at_next_run_ = true;  // Note [the ranks that fell behind] in deadlock.h
  }
  if (!verdict.fail_mine) return;
  for (TensorEntry* e : waited) complete(e, Outcome{Status::Deadlock, verdict.message});
  EntryList still;
  for (auto& e : pending_) {
    if (!e->done) still.push_back(std::move(e));
  }
  pending_.swap(still);
}

void Group::fail_pending(Status status, const std::string& reason) {
  if (device_) device_->abort();  // no rank may stay blocked inside NCCL
  EntryList orphans;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopped_ = true;
    stop_status_ = status;
    stop_reason_ = reason;
    for (auto& e : queue_) orphans.push_back(std::move(e));
    queue_.clear();
    in_flight_.clear();
  }
  for (auto& e : pending_) orphans.push_back(std::move(e));
  pending_.clear();
  for (auto& e : orphans) {
    if (e->done) continue;
    handles_.complete(e->handle, Outcome{status, reason + " [request '" + e->request.name + "']"});
  }
}

}  // namespace hvdlite
