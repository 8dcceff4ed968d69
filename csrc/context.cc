#include "context.h"

#include "timeline.h"

namespace hvdlite {

Context::Context(std::unique_ptr<Transport> transport, Config config)
    : transport_(std::move(transport)),
      config_(config),
      controller_(*transport_, config_),
      allreduce_(*transport_, config_,
                 [this](TensorEntry* e, Outcome o) { complete(e, std::move(o)); }) {
  controller_.check_settings_agree();  // before the thread: a mismatch fails init() itself
  thread_ = std::thread([this] { run_loop(); });
}

Context::~Context() { shutdown(); }

std::vector<int64_t> Context::enqueue(EntryList entries) {
  std::vector<int64_t> handles;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopped_) throw Error(stop_status_, stop_reason_);
    std::unordered_set<std::string> batch;
    for (auto& e : entries) {
      const std::string& name = e->request.name;
      if (in_flight_.count(name) || !batch.insert(name).second) {
        throw Error(Status::InvalidArgument,
                    "a " + std::string(op_name(e->request.op)) + " named '" + name +
                    "' is already in flight on rank " + std::to_string(topology().rank) +
                    ": names must be unique among outstanding requests (synchronize the earlier "
                    "one first, or pass a different name)");
      }
    }
    for (auto& e : entries) {
      e->request.rank = topology().rank;
      e->handle = handles_.create();
      handles.push_back(e->handle);
      in_flight_.insert(e->request.name);
      queue_.push_back(std::move(e));
    }
    work_queued_ = true;
  }
  cv_.notify_one();
  return handles;
}

void Context::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    shutdown_requested_ = true;
    work_queued_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Context::complete(TensorEntry* entry, Outcome outcome) {
  entry->done = true;
  trace_completed(*entry, outcome.status == Status::Success);
  {
    std::lock_guard<std::mutex> lk(mu_);
    in_flight_.erase(entry->request.name);
  }
  handles_.complete(entry->handle, std::move(outcome));
}

}  // namespace hvdlite
