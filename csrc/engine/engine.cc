#include "engine/engine.h"

#include <algorithm>

#include "engine/rank_computing.h"

namespace hvdlite {
namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

std::string request_subject(const EntryList& entries) {
  if (entries.empty()) return "request";
  const Request& r = entries.front()->request;
  return std::string(op_name(r.op)) + " of tensor '" + r.name + "'";
}

}  // namespace

Engine::Engine(std::unique_ptr<Transport> world, Config config)
    : Engine(std::move(world), config, SetTable{}) {}

Engine::Engine(std::unique_ptr<Transport> world, Config config, const SetTable& sets)
    : config_(config), topology_(world->topology()) {
  for (const auto& kv : sets.ranks) {
    const std::vector<int>& ranks = kv.second;
    const auto pos = std::find(ranks.begin(), ranks.end(), topology_.rank);
    const int index = pos == ranks.end() ? -1 : static_cast<int>(pos - ranks.begin());
    std::unique_ptr<Transport> sub = world->split(index < 0 ? -1 : 0, index, Transport::SplitFor::ProcessSet);
    set_ranks_[kv.first] = ranks;
    if (sub) {
      groups_[kv.first] = std::make_shared<Group>(Membership{kv.first, ranks}, std::move(sub),
                                                  config_, handles_);
    }
  }
  free_ids_ = sets.free_ids;
  next_id_ = sets.next_id;
  std::vector<int> everyone(topology_.size);
  for (int r = 0; r < topology_.size; ++r) everyone[r] = r;
  set_ranks_[0] = everyone;
  world_ = std::make_shared<Group>(
      Membership{0, {}}, std::move(world), config_, handles_,
      [this](const Response& r) { return apply_change(r); },
      [this] { stop_process_sets(); },
      Group::CrossSetWatch{[this] { return set_waits(); },
                           [this](const std::string& message) { stop_for_deadlock(message); }});
  groups_[0] = world_;
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  // Every group at once: a member of a set may be waiting there for this rank, and only the
  // set's own round can tell it. On other ranks, group 0's loop stops their sets when it sees
  // the shutdown (stop_process_sets).
  const std::vector<std::shared_ptr<Group>> groups = all_groups();
  for (auto& g : groups) g->request_stop();
  for (auto& g : groups) g->join();
  world_->join();  // a set added meanwhile is stopped by group 0's loop as it ends
}

std::shared_ptr<Engine> Engine::rebuild(std::vector<int>* lost) {
  shutdown();  // every loop has ended: nothing else uses the old transports now
  std::vector<int> gone;
  std::unique_ptr<Transport> survivors = world_->transport().shrink(&gone);
  if (lost) *lost = gone;
  return successor(std::move(survivors), gone);
}

std::shared_ptr<Engine> Engine::regroup(const std::vector<int>& leaving,
                                        const std::vector<std::string>& command,
                                        const std::vector<Transport::NewProcess>& add) {
  if (!add.empty()) {
    std::lock_guard<std::mutex> lk(sets_mu_);
    if (set_ranks_.size() > 1) {
      // New processes start with only the global set; they cannot take part in the others'.
      throw Error(Status::InvalidArgument,
                  "elastic: cannot add ranks to a job with process sets besides the global "
                  "one (remove them first); the job keeps its " +
                  std::to_string(topology_.size) + " ranks");
    }
  }
  shutdown();
  std::unique_ptr<Transport> next = world_->transport().regroup(leaving, command, add);
  if (!next) return nullptr;  // this rank left
  std::vector<int> gone = leaving;
  std::sort(gone.begin(), gone.end());
  return successor(std::move(next), gone);
}

std::shared_ptr<Engine> Engine::successor(std::unique_ptr<Transport> world,
                                          const std::vector<int>& gone) {
  // Old global rank -> new one (-1 for the gone), the order of the others kept; ranks added
  // come after them and are in no process set.
  std::vector<int> renumber(topology_.size, -1);
  for (int r = 0, next = 0, g = 0; r < topology_.size; ++r) {
    if (g < static_cast<int>(gone.size()) && gone[g] == r) {
      ++g;
    } else {
      renumber[r] = next++;
    }
  }
  SetTable sets;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    sets.free_ids = free_ids_;
    sets.next_id = next_id_;
    for (const auto& kv : set_ranks_) {
      if (kv.first == 0) continue;
      std::vector<int> kept;
      for (int r : kv.second) {
        if (renumber[r] >= 0) kept.push_back(renumber[r]);
      }
      if (kept.empty()) sets.free_ids.push_back(kv.first);
      else sets.ranks[kv.first] = kept;
    }
  }
  return std::shared_ptr<Engine>(new Engine(std::move(world), config_, sets));
}

std::string Engine::unknown_set(int id) const {
  std::string known;
  for (const auto& kv : set_ranks_) known += (known.empty() ? "" : ", ") + std::to_string(kv.first);
  return "process set " + std::to_string(id) + " does not exist (it was never added, or was "
         "removed); the existing sets are " + known;
}

std::vector<int64_t> Engine::enqueue(int process_set, EntryList entries, bool wake) {
  // The global set always exists, with every rank in it: no table to look in.
  if (process_set == 0) return world_->enqueue(std::move(entries), wake);
  std::shared_ptr<Group> group;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    auto ranks = set_ranks_.find(process_set);
    if (ranks == set_ranks_.end()) {
      throw Error(Status::InvalidArgument, request_subject(entries) + ": " + unknown_set(process_set));
    }
    auto it = groups_.find(process_set);
    if (it == groups_.end()) {
      throw Error(Status::InvalidArgument,
                  request_subject(entries) + ": rank " + std::to_string(topology_.rank) +
                  " is not a member of process set " + std::to_string(process_set) + " (ranks " +
                  rank_list(ranks->second) + "); only its members may call collectives on it");
    }
    group = it->second;
  }
  return group->enqueue(std::move(entries), wake);
}

std::shared_ptr<Group> Engine::group_of(int owner) {
  if (owner < 0) return nullptr;
  if (owner == 0) return world_;
  std::lock_guard<std::mutex> lk(sets_mu_);
  auto it = groups_.find(owner);
  return it == groups_.end() ? nullptr : it->second;
}

std::shared_ptr<Group> Engine::owner_of(int64_t handle) { return group_of(handles_.owner(handle)); }

Group* Engine::owner_of(int64_t handle, std::shared_ptr<Group>& keep) {
  const int owner = handles_.owner(handle);
  if (owner == 0) return world_.get();  // as long-lived as the engine: no count to take
  keep = group_of(owner);
  return keep.get();
}

Outcome Engine::wait(int64_t handle) {
  HvdliteThread::Scope waiting;  // its CPU time is hvdlite's (Note [computing ranks])
  Blocked blocked(*this, handle);
  std::shared_ptr<Group> keep;
  if (Group* group = owner_of(handle, keep)) group->help(handle);
  return handles_.wait(handle);
}

std::optional<Outcome> Engine::wait_until(int64_t handle, const Deadline& until) {
  HvdliteThread::Scope waiting;
  std::shared_ptr<Group> keep;
  if (Group* group = owner_of(handle, keep)) group->help(handle, until);
  return handles_.wait_until(handle, until);
}

Engine::Blocked::Blocked(Engine& engine, int64_t handle) : group_(engine.owner_of(handle)), handle_(handle) {
  if (group_) group_->begin_wait(handle_);
}

Engine::Blocked::~Blocked() {
  if (group_) group_->end_wait(handle_);
}

void Engine::watch(int64_t handle) {
  auto blocked = std::make_unique<Blocked>(*this, handle);
  {
    std::lock_guard<std::mutex> lk(watched_mu_);
    watched_[handle] = std::move(blocked);
  }
  handles_.watch(handle);
}

std::optional<int64_t> Engine::next_watched(std::chrono::steady_clock::time_point until) {
  HvdliteThread::Scope waiting;
  int64_t oldest = 0;
  {
    std::lock_guard<std::mutex> lk(watched_mu_);
    if (!watched_.empty()) oldest = watched_.begin()->first;
  }
  if (oldest != 0) {
    std::shared_ptr<Group> group = owner_of(oldest);
    // Until any watched request finished, not only the oldest (which may be waiting on a peer).
    if (group) group->help(oldest, Deadline::at(until), [this] { return handles_.any_watched_finished(); });
  }
  std::optional<int64_t> handle = handles_.next_watched(until);
  if (handle) {
    std::unique_ptr<Blocked> blocked;  // ends the blocked count outside the lock
    std::lock_guard<std::mutex> lk(watched_mu_);
    auto it = watched_.find(*handle);
    if (it != watched_.end()) {
      blocked = std::move(it->second);
      watched_.erase(it);
    }
  }
  return handle;
}

Engine::ProcessSetInfo Engine::process_set(int id) const {
  std::lock_guard<std::mutex> lk(sets_mu_);
  auto it = set_ranks_.find(id);
  if (it == set_ranks_.end()) throw Error(Status::InvalidArgument, unknown_set(id));
  ProcessSetInfo info;
  info.ranks = it->second;
  auto pos = std::find(info.ranks.begin(), info.ranks.end(), topology_.rank);
  if (pos != info.ranks.end()) info.rank = static_cast<int>(pos - info.ranks.begin());
  return info;
}

std::shared_ptr<PeerChannel> Engine::peer_channel(int id, const std::string& what) const {
  std::shared_ptr<Group> group;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    auto ranks = set_ranks_.find(id);
    if (ranks == set_ranks_.end()) throw Error(Status::InvalidArgument, what + ": " + unknown_set(id));
    auto it = groups_.find(id);
    if (it == groups_.end()) {
      throw Error(Status::InvalidArgument,
                  what + ": rank " + std::to_string(topology_.rank) + " is not a member of "
                  "process set " + std::to_string(id) + " (ranks " + rank_list(ranks->second) + ")");
    }
    group = it->second;
  }
  std::shared_ptr<PeerChannel> channel = group->transport().peer_channel();
  if (!channel) {
    throw Error(Status::InvalidArgument,
                what + ": this transport has no point-to-point channel (the MPI backend needs "
                "MPI initialised with MPI_THREAD_MULTIPLE for it)");
  }
  return channel;
}

std::vector<int> Engine::process_set_ids() const {
  std::lock_guard<std::mutex> lk(sets_mu_);
  std::vector<int> ids;
  for (const auto& kv : set_ranks_) ids.push_back(kv.first);
  return ids;
}

int64_t Engine::submit_change(OpType op, std::vector<int64_t> shape, int32_t root) {
  auto e = std::make_unique<TensorEntry>();
  // Every rank changes the table in the same order, so the n-th change has the same name.
  {
    std::lock_guard<std::mutex> lk(changes_mu_);
    e->request.name = std::string("hvdlite.") + op_name(op) + "." + changes_prefix_ + std::to_string(changes_++);
  }
  e->request.op = op;
  e->request.dtype = DataType::UInt8;
  e->request.shape = std::move(shape);
  e->request.root = root;
  EntryList list;
  list.push_back(std::move(e));
  return enqueue(0, std::move(list))[0];
}

void Engine::restart_change_numbering(int64_t round) {
  std::lock_guard<std::mutex> lk(changes_mu_);
  changes_prefix_ = "r" + std::to_string(round) + ".";
  changes_ = 0;
}

int Engine::add_process_set(const std::vector<int>& ranks, const Waiter& wait) {
  if (ranks.empty()) {
    throw Error(Status::InvalidArgument, "a process set needs at least one rank");
  }
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= topology_.size) {
      throw Error(Status::InvalidArgument, "process set ranks " + rank_list(ranks) + ": rank " +
                  std::to_string(sorted[i]) + " is out of range for a job of " +
                  std::to_string(topology_.size) + " ranks");
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      throw Error(Status::InvalidArgument, "process set ranks " + rank_list(ranks) +
                  " name rank " + std::to_string(sorted[i]) + " more than once");
    }
  }
  const int64_t h = submit_change(OpType::AddProcessSet, std::vector<int64_t>(sorted.begin(), sorted.end()), 0);
  Outcome o = wait ? wait(h) : this->wait(h);
  if (o.status != Status::Success) throw Error(o.status, o.error);
  return o.process_set_id;
}

bool Engine::remove_process_set(int id, const Waiter& wait) {
  if (id == 0) return false;  // the global set stays
  const int64_t h = submit_change(OpType::RemoveProcessSet, {}, id);
  Outcome o = wait ? wait(h) : this->wait(h);
  if (o.status != Status::Success) throw Error(o.status, o.error);
  return o.process_set_id == id;
}

Outcome Engine::apply_change(const Response& r) {
  Outcome out;
  if (r.op == OpType::RemoveProcessSet) {
    std::shared_ptr<Group> group;
    {
      std::lock_guard<std::mutex> lk(sets_mu_);
      if (r.root == 0 || !set_ranks_.count(r.root)) return out;  // process_set_id -1: nothing removed
      set_ranks_.erase(r.root);
      auto it = groups_.find(r.root);
      if (it != groups_.end()) {
        group = it->second;
        groups_.erase(it);
      }
      free_ids_.push_back(r.root);
    }
    // Every member's group 0 gets here; their loops stop together.
    if (group) group->stop(group->members().name() + " was removed while this request was pending");
    out.process_set_id = r.root;
    return out;
  }

  const std::vector<int> ranks(r.shape.begin(), r.shape.end());
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    for (const auto& kv : set_ranks_) {
      if (kv.second == ranks) {
        return Outcome{Status::InvalidArgument,
                       "Attempted to add a duplicate process set: ranks " + rank_list(ranks) +
                       " already form " + (kv.first == 0 ? std::string("the global process set")
                                                         : "process set " + std::to_string(kv.first))};
      }
    }
  }
  const auto pos = std::find(ranks.begin(), ranks.end(), topology_.rank);
  const int index = pos == ranks.end() ? -1 : static_cast<int>(pos - ranks.begin());
  std::unique_ptr<Transport> sub;
  try {
    sub = world_->transport().split(index < 0 ? -1 : 0, index,
                                     Transport::SplitFor::ProcessSet);
  } catch (const Error& e) {
    return Outcome{e.status(), e.what()};
  }
  int id;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    if (!free_ids_.empty()) {
      id = free_ids_.front();
      free_ids_.pop_front();
    } else {
      id = next_id_++;
    }
  }
  std::shared_ptr<Group> group;
  if (sub) group = std::make_shared<Group>(Membership{id, ranks}, std::move(sub), config_, handles_);
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    set_ranks_[id] = ranks;
    if (group) groups_[id] = group;
  }
  out.process_set_id = id;
  return out;
}

std::vector<SetWaits> Engine::set_waits() {
  std::vector<SetWaits> out;
  for (auto& g : all_groups()) {
    SetWaits w = g->waits();
    if (!w.pending.empty() || !w.waits.empty()) out.push_back(std::move(w));
  }
  return out;
}

void Engine::stop_for_deadlock(const std::string& message) {
  for (auto& g : all_groups()) g->request_failure_stop(Status::Deadlock, message);
}

std::vector<std::shared_ptr<Group>> Engine::all_groups() {
  std::vector<std::shared_ptr<Group>> groups;
  std::lock_guard<std::mutex> lk(sets_mu_);
  for (const auto& kv : groups_) groups.push_back(kv.second);
  return groups;
}

void Engine::stop_process_sets() {
  std::vector<std::shared_ptr<Group>> others;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    for (const auto& kv : groups_) {
      if (kv.first != 0) others.push_back(kv.second);
    }
  }
  for (auto& g : others) g->request_stop();
  for (auto& g : others) g->join();
}

}  // namespace hvdlite
