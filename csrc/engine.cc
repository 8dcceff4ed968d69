// The background loop: drain queue -> negotiate -> execute (fusing all-reduces) -> complete.
// It never sleeps on a fixed cycle: with no work it blocks on a condition variable, and with
// work it is always inside a negotiation round (see Controller::wait_for_round).
#include <chrono>
#include <cstdio>
#include <thread>
#include <unordered_map>

#include "collectives.h"
#include "context.h"
#include "timeline.h"

namespace hvdlite {

void Context::run_loop() {
  try {
    while (true) {
      bool shutdown_requested;
      if (pending_.empty()) {
        // Work tends to follow work (the next gradient of a backward pass, the next step of
        // a loop): look for it briefly before sleeping on the condition variable.
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
        while (!work_queued_ && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      }
      {
        std::unique_lock<std::mutex> lk(mu_);
        // Idle: wake now and then so the stall inspector can answer and warn.
        while (!cv_.wait_for(lk, controller_.stall_poll_interval(),
                             [&] { return !queue_.empty() || !pending_.empty() || shutdown_requested_; })) {
          lk.unlock();
          controller_.check_stalls(pending_);
          lk.lock();
        }
        for (auto& e : queue_) {
          trace_drained(*e);
          pending_.push_back(std::move(e));
        }
        queue_.clear();
        work_queued_ = shutdown_requested_;
        shutdown_requested = shutdown_requested_;
      }
      trace_round();
      RoundOutcome round = controller_.negotiate(pending_, shutdown_requested);
      execute(round.responses);
      if (round.shutdown) {
        std::string who = round.shutdown_ranks.size() > 1 ? "ranks " : "rank ";
        for (size_t i = 0; i < round.shutdown_ranks.size(); ++i) {
          who += (i ? ", " : "") + std::to_string(round.shutdown_ranks[i]);
        }
        stop(Status::ShutDown,
             "hvdlite has been shut down: " + who + " called hvdlite.shutdown() or exited while "
             "this request was pending; every rank must submit the same collectives before "
             "shutting down");
        return;
      }
    }
  } catch (const Error& e) {
    stop(e.status(), std::string("hvdlite stopped: ") + e.what());
  } catch (const std::exception& e) {
    stop(Status::Internal, std::string("hvdlite stopped: ") + e.what());
  }
}

void Context::execute(const std::vector<Response>& responses) {
  if (responses.empty()) return;
  std::unordered_map<std::string, TensorEntry*> by_name;
  TensorEntry* join_entry = nullptr;
  for (auto& e : pending_) {
    if (e->request.op == OpType::Join) join_entry = e.get();
    else by_name[e->request.name] = e.get();
  }
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
      std::fprintf(stderr, "[hvdlite rank %d] run %s '%s'\n", topology().rank, op_name(r.op), r.name.c_str());
    }
    switch (r.op) {
      case OpType::Allreduce:
        allreduce_.add(r, e);  // e is null on a joined rank: it contributes zeros
        break;
      case OpType::Broadcast:
        if (e) complete(e, run_broadcast(*transport_, r, *e));
        break;
      case OpType::Allgather:
        if (e) complete(e, run_allgather(*transport_, r, *e));
        break;
      case OpType::Alltoall:
        if (e) complete(e, run_alltoall(*transport_, r, *e));
        break;
      case OpType::Reducescatter:
        if (e) complete(e, run_reducescatter(*transport_, r, *e, work_, scratch_, config_.ring_piece_bytes));
        break;
      case OpType::Barrier:
        // Negotiation already proved every rank reached it.
        if (e) complete(e, Outcome{});
        break;
      case OpType::Join: {
        Outcome o;
        o.last_joined_rank = r.last_joined_rank;
        if (e) complete(e, std::move(o));
        break;
      }
    }
  }
  allreduce_.flush();
  EntryList still;
  for (auto& e : pending_) {
    if (!e->done) still.push_back(std::move(e));
  }
  pending_.swap(still);
}

void Context::stop(Status status, const std::string& reason) {
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
