#include "engine/validate.h"

#include "algorithms/adasum.h"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <unordered_map>

namespace hvdlite {
namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream s;
  for (size_t i = 0; i < ranks.size(); ++i) s << (i ? ", " : "") << ranks[i];
  return s.str();
}

// "rank 0 has [4, 3]; ranks 1, 2 have [5, 3]": values grouped with the ranks holding them.
std::string describe_by_rank(const std::vector<const Request*>& reqs, const Membership& members,
                             const std::function<std::string(const Request&)>& value_of) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const Request* r : reqs) {
    std::string v = value_of(*r);
    const int rank = members.global(r->rank);
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == v; });
    if (it == groups.end()) groups.push_back({v, {rank}});
    else it->second.push_back(rank);
  }
  std::ostringstream s;
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& ranks = groups[i].second;
    s << (i ? "; " : "") << (ranks.size() > 1 ? "ranks " : "rank ");
    for (size_t j = 0; j < ranks.size(); ++j) s << (j ? ", " : "") << ranks[j];
    s << (ranks.size() > 1 ? " have " : " has ") << groups[i].first;
  }
  return s.str();
}

// Returns an error message when the ranks disagree on value_of, else empty.
std::string check_same(const std::vector<const Request*>& reqs, const Membership& members,
                       const char* what,
                       const std::function<std::string(const Request&)>& value_of) {
  std::string first = value_of(*reqs[0]);
  for (const Request* r : reqs) {
    if (value_of(*r) != first) {
      return std::string("Mismatched ") + what + " for " + op_name(reqs[0]->op) + " of tensor '" +
             reqs[0]->name + "'" + members.where() + ": " + describe_by_rank(reqs, members, value_of) + ".";
    }
  }
  return {};
}

std::string num(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

std::vector<int64_t> trailing(const std::vector<int64_t>& shape) {
  return shape.empty() ? shape : std::vector<int64_t>(shape.begin() + 1, shape.end());
}

// Validates one ready tensor; fills response or its error.
Response validate(const std::vector<const Request*>& reqs, const Membership& members, int size) {
  const Request& first = *reqs[0];
  Response resp;
  static_cast<TensorSpec&>(resp) = first;
  auto check_same = [&](const char* what, const std::function<std::string(const Request&)>& value_of) {
    return hvdlite::check_same(reqs, members, what, value_of);
  };

  std::string err = check_same("operations", [](const Request& r) { return std::string(op_name(r.op)); });
  if (err.empty() && first.op != OpType::Barrier) {
    err = check_same("data types", [](const Request& r) { return std::string(dtype_name(r.dtype)); });
  }
  auto shape_of = [](const Request& r) { return shape_string(r.shape); };
  auto scales = [&]() {
    std::string e = check_same("reduce ops", [](const Request& r) { return std::string(reduce_op_name(r.reduce_op)); });
    if (e.empty()) e = check_same("prescale factors", [](const Request& r) { return num(r.prescale); });
    if (e.empty()) e = check_same("postscale factors", [](const Request& r) { return num(r.postscale); });
    return e;
  };
  if (err.empty()) {
    err = check_same("data paths", [](const Request& r) {
      return std::string(r.nccl ? "NCCL (a CUDA tensor)" : "host algorithms");
    });
  }
  if (err.empty()) {
    switch (first.op) {
      case OpType::Allreduce:
        err = scales();
        if (err.empty()) err = check_same("compression", [](const Request& r) { return std::string(compression_name(r.compression)); });
        if (err.empty()) err = check_same("shapes", shape_of);
        if (err.empty() && first.reduce_op == ReduceOp::Adasum && !adasum_rank_count_ok(size)) {
          resp.error_status = Status::InvalidArgument;  // the same on every rank: not a mismatch
          resp.error = "Adasum all-reduce of tensor '" + first.name + "'" + members.where() +
                       ": Adasum needs a power-of-two number of ranks (as in Horovod), and " +
                       members.name() + " has " + std::to_string(size);
          return resp;
        }
        break;
      case OpType::Reducescatter:
        err = scales();
        if (err.empty()) err = check_same("shapes", shape_of);
        break;
      case OpType::Broadcast:
        err = check_same("root ranks", [](const Request& r) { return std::to_string(r.root); });
        if (err.empty() && !members.contains(first.root, size)) {
          err = "Invalid root rank " + std::to_string(first.root) + " for broadcast of tensor '" +
                first.name + "'" + members.where() + ": " +
                (members.global_ranks.empty() ? "the job has " + std::to_string(size) + " ranks."
                                              : "the root must be one of the set's ranks.");
        }
        if (err.empty()) err = check_same("shapes", shape_of);
        break;
      case OpType::Allgather:
      case OpType::Alltoall:
        err = check_same("ranks (number of dimensions)", [](const Request& r) { return std::to_string(r.shape.size()); });
        if (err.empty()) err = check_same("shapes beyond dimension 0", [](const Request& r) { return shape_string(trailing(r.shape)); });
        if (err.empty()) {  // all-gather: the output's layout; all-to-all: Note [agreed allocations]
          resp.first_dims.assign(size, 0);
          for (const Request* r : reqs) resp.first_dims[r->rank] = r->shape.empty() ? 1 : r->shape[0];
        }
        break;
      case OpType::AddProcessSet:
        err = check_same("process set ranks", shape_of);
        break;
      case OpType::RemoveProcessSet:
        err = check_same("process set ids", [](const Request& r) { return std::to_string(r.root); });
        break;
      case OpType::Barrier:
      case OpType::Join:
        break;
    }
  }
  if (!err.empty()) {
    resp.error_status = Status::Mismatch;
    resp.error = err;
  }
  return resp;
}

}  // namespace

bool Membership::contains(int global_rank, int size) const {
  if (global_ranks.empty()) return global_rank >= 0 && global_rank < size;
  return std::find(global_ranks.begin(), global_ranks.end(), global_rank) != global_ranks.end();
}

std::string Membership::name() const {
  if (set_id == 0) return "the global process set";
  return "process set " + std::to_string(set_id) + " (ranks " + rank_list(global_ranks) + ")";
}

std::vector<Response> decide_ready(const std::vector<std::vector<Request>>& requests_by_rank,
                                   const Membership& members) {
  const int size = static_cast<int>(requests_by_rank.size());
  // Joined ranks and when they joined.
  std::vector<const Request*> joins(size, nullptr);
  // name -> request per rank, in first-seen order (rank 0's order first) for determinism.
  std::vector<std::string> order;
  std::unordered_map<std::string, std::vector<const Request*>> by_name;
  for (int r = 0; r < size; ++r) {
    for (const Request& req : requests_by_rank[r]) {
      if (req.op == OpType::Join) { joins[r] = &req; continue; }
      auto& slot = by_name[req.name];
      if (slot.empty()) { slot.assign(size, nullptr); order.push_back(req.name); }
      slot[r] = &req;
    }
  }

  std::vector<Response> out;
  for (const std::string& name : order) {
    const auto& slot = by_name[name];
    std::vector<const Request*> present;
    std::vector<int> joined_missing, missing;
    for (int r = 0; r < size; ++r) {
      if (slot[r]) present.push_back(slot[r]);
      else if (joins[r]) joined_missing.push_back(r);
      else missing.push_back(r);
    }
    // Joined ranks stand in with zeros, which only makes sense for an all-reduce. Anything
    // else fails at once, without waiting for the ranks still to submit it: a joined rank
    // never will, and ranks that call it under different generated names would wait forever.
    if (!joined_missing.empty()) {
      bool all_allreduce = std::all_of(present.begin(), present.end(),
                                       [](const Request* r) { return r->op == OpType::Allreduce; });
      if (!all_allreduce) {
        Response resp;
        resp.name = name;
        resp.op = present[0]->op;
        resp.error_status = Status::InvalidArgument;
        std::ostringstream s;
        s << op_name(present[0]->op) << " of tensor '" << name << "'" << members.where()
          << " is not supported after join(): rank" << (joined_missing.size() > 1 ? "s " : " ");
        for (size_t i = 0; i < joined_missing.size(); ++i) s << (i ? ", " : "") << members.global(joined_missing[i]);
        s << " already joined. Only all-reduce continues while ranks are joined.";
        resp.error = s.str();
        out.push_back(resp);
        continue;
      }
    }
    if (!missing.empty()) continue;  // some rank has not submitted it yet
    out.push_back(validate(present, members, size));
  }

  if (std::all_of(joins.begin(), joins.end(), [](const Request* r) { return r != nullptr; })) {
    Response resp;
    resp.name = joins[0]->name;
    resp.op = OpType::Join;
    int last = 0;
    for (int r = 1; r < size; ++r) {
      if (joins[r]->join_round >= joins[last]->join_round) last = r;
    }
    resp.last_joined_rank = members.global(last);
    out.push_back(resp);
  }
  return out;
}

}  // namespace hvdlite
