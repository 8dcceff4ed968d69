// The coordinator's decision function: readiness, agreement checks and their messages, join,
// and naming of ranks and sets within a process set.
#include "engine/validate.h"
#include "harness.h"

namespace hvdlite {
namespace {

Request req(const std::string& name, int rank, std::vector<int64_t> shape,
            OpType op = OpType::Allreduce, DataType dtype = DataType::Float32) {
  Request r;
  r.name = name;
  r.rank = rank;
  r.shape = std::move(shape);
  r.op = op;
  r.dtype = dtype;
  return r;
}

TEST(decide_waits_for_every_rank) {
  std::vector<std::vector<Request>> by_rank = {{req("a", 0, {4})}, {}, {req("a", 2, {4})}};
  CHECK(decide_ready(by_rank).empty());
  by_rank[1].push_back(req("a", 1, {4}));
  auto out = decide_ready(by_rank);
  CHECK_EQ(out.size(), size_t(1));
  CHECK(out[0].ok());
  CHECK_EQ(out[0].name, std::string("a"));
}

TEST(decide_orders_by_first_seen_on_rank_0) {
  std::vector<std::vector<Request>> by_rank = {
      {req("b", 0, {1}), req("a", 0, {1})}, {req("a", 1, {1}), req("b", 1, {1})}};
  auto out = decide_ready(by_rank);
  CHECK_EQ(out.size(), size_t(2));
  CHECK_EQ(out[0].name, std::string("b"));
  CHECK_EQ(out[1].name, std::string("a"));
}

TEST(decide_reports_mismatches_grouped_by_value) {
  std::vector<std::vector<Request>> by_rank = {
      {req("t", 0, {4, 3})}, {req("t", 1, {5, 3})}, {req("t", 2, {5, 3})}};
  auto out = decide_ready(by_rank);
  CHECK_EQ(out.size(), size_t(1));
  CHECK(out[0].error_status == Status::Mismatch);
  CHECK_EQ(out[0].error, std::string("Mismatched shapes for allreduce of tensor 't': rank 0 has "
                                     "[4, 3]; ranks 1, 2 have [5, 3]."));
  by_rank = {{req("d", 0, {2})}, {req("d", 1, {2}, OpType::Allreduce, DataType::Float64)}};
  CHECK(decide_ready(by_rank)[0].error.find("Mismatched data types") == 0);
  by_rank = {{req("o", 0, {2})}, {req("o", 1, {2}, OpType::Allgather)}};
  CHECK(decide_ready(by_rank)[0].error.find("Mismatched operations") == 0);
  Request scaled = req("s", 1, {2});
  scaled.prescale = 0.5;
  by_rank = {{req("s", 0, {2})}, {scaled}};
  CHECK(decide_ready(by_rank)[0].error.find("Mismatched prescale factors") == 0);
  // A CUDA tensor over NCCL on one rank and host data on another cannot meet.
  Request on_device = req("g", 1, {2});
  on_device.nccl = true;
  by_rank = {{req("g", 0, {2})}, {on_device}};
  CHECK(decide_ready(by_rank)[0].error.find("Mismatched data paths") == 0);
  CHECK(decide_ready(by_rank)[0].error.find("NCCL") != std::string::npos);
}

TEST(decide_allgather_records_first_dims) {
  std::vector<std::vector<Request>> by_rank = {
      {req("g", 0, {2, 3}, OpType::Allgather)}, {req("g", 1, {0, 3}, OpType::Allgather)},
      {req("g", 2, {5, 3}, OpType::Allgather)}};
  auto out = decide_ready(by_rank);
  CHECK(out[0].ok());
  CHECK(out[0].first_dims == std::vector<int64_t>({2, 0, 5}));
  by_rank[1][0].shape = {1, 4};
  CHECK(decide_ready(by_rank)[0].error.find("Mismatched shapes beyond dimension 0") == 0);
}

TEST(decide_join_stands_in_for_allreduce_only) {
  Request join = req("join", 1, {}, OpType::Join);
  join.join_round = 3;
  std::vector<std::vector<Request>> by_rank = {{req("a", 0, {2})}, {join}};
  auto out = decide_ready(by_rank);
  CHECK_EQ(out.size(), size_t(1));
  CHECK(out[0].ok());
  by_rank = {{req("g", 0, {2}, OpType::Allgather)}, {join}};
  out = decide_ready(by_rank);
  CHECK(out[0].error_status == Status::InvalidArgument);
  CHECK(out[0].error.find("not supported after join(): rank 1 already joined") != std::string::npos);
  // At 3 ranks it fails at once, also while rank 2 has not submitted it (rank 2 may be
  // waiting on an all-gather under another generated name: both would wait forever).
  by_rank = {{req("g", 0, {2}, OpType::Allgather)}, {join}, {}};
  out = decide_ready(by_rank);
  CHECK_EQ(out.size(), size_t(1));
  CHECK(out[0].error_status == Status::InvalidArgument);
  // An all-reduce still waits for rank 2, with rank 1 standing in with zeros.
  CHECK(decide_ready({{req("a", 0, {2})}, {join}, {}}).empty());
  // Everyone joined: the last to join is reported.
  Request join0 = req("join", 0, {}, OpType::Join);
  join0.join_round = 5;
  out = decide_ready({{join0}, {join}});
  CHECK_EQ(out.size(), size_t(1));
  CHECK(out[0].op == OpType::Join);
  CHECK_EQ(out[0].last_joined_rank, 0);
}

TEST(decide_in_a_process_set_names_global_ranks_and_the_set) {
  Membership set{4, {1, 5, 7}};
  std::vector<std::vector<Request>> by_rank = {
      {req("t", 0, {2})}, {req("t", 1, {3})}, {req("t", 2, {3})}};
  auto out = decide_ready(by_rank, set);
  CHECK_EQ(out[0].error, std::string("Mismatched shapes for allreduce of tensor 't' in process set 4 "
                                     "(ranks 1, 5, 7): rank 1 has [2]; ranks 5, 7 have [3]."));
  // Broadcast roots are global ranks and must be members.
  auto bcast = [&](int root) {
    std::vector<std::vector<Request>> b;
    for (int r = 0; r < 3; ++r) {
      b.push_back({req("b", r, {2}, OpType::Broadcast)});
      b.back()[0].root = root;
    }
    return decide_ready(b, set)[0];
  };
  CHECK(bcast(5).ok());
  CHECK(bcast(2).error.find("Invalid root rank 2 for broadcast of tensor 'b' in process set 4") == 0);
  // Join reports the global rank.
  Request j0 = req("join", 0, {}, OpType::Join), j1 = req("join", 1, {}, OpType::Join),
          j2 = req("join", 2, {}, OpType::Join);
  j1.join_round = 9;
  out = decide_ready({{j0}, {j1}, {j2}}, set);
  CHECK_EQ(out[0].last_joined_rank, 5);
}

TEST(decide_process_set_changes_must_agree) {
  std::vector<std::vector<Request>> by_rank = {
      {req("c", 0, {0, 1}, OpType::AddProcessSet, DataType::UInt8)},
      {req("c", 1, {0, 2}, OpType::AddProcessSet, DataType::UInt8)}};
  auto out = decide_ready(by_rank);
  CHECK(out[0].error.find("Mismatched process set ranks for add_process_set") == 0);
  by_rank[1][0].shape = {0, 1};
  CHECK(decide_ready(by_rank)[0].ok());
}

}  // namespace
}  // namespace hvdlite
