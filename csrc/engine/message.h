// Request: what one rank submitted for one tensor, as the coordinator sees it.
// Response: what every rank executes, decided by the coordinator (or taken from the cache).
// Both travel as bytes through the controller's gather/broadcast.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvdlite.h"

namespace hvdlite {

// What a tensor's request and its response have in common: which collective, on what.
struct TensorSpec {
  std::string name;
  OpType op = OpType::Allreduce;
  DataType dtype = DataType::Float32;
  ReduceOp reduce_op = ReduceOp::Sum;
  Compression compression = Compression::None;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  bool nccl = false;  // a CUDA tensor that goes through NCCL (device/nccl_collectives.h)
  std::vector<int64_t> shape;  // for a response: the agreed shape (allreduce, broadcast, reducescatter)
};

struct Request : TensorSpec {
  int32_t process_set = 0;      // the set it was submitted to (0: every rank)
  int32_t rank = 0;             // the submitting rank's position in that set
  int64_t join_round = 0;       // Join: negotiation round in which this rank joined
};

struct Response : TensorSpec {
  int32_t last_joined_rank = -1;   // Join
  std::vector<int64_t> first_dims; // allgather: dimension 0 of every rank's tensor
  Status error_status = Status::Success;
  std::string error;               // set when validation failed; reported on every rank

  bool ok() const { return error_status == Status::Success; }
  // True when a rank's new request can reuse this response without asking the coordinator.
  bool matches(const Request& r) const;
};

int64_t num_elements(const std::vector<int64_t>& shape);
std::string shape_string(const std::vector<int64_t>& shape);

void encode_requests(const std::vector<Request>& requests, std::vector<uint8_t>& out);
std::vector<Request> decode_requests(const uint8_t* data, size_t size);
void encode_responses(const std::vector<Response>& responses, std::vector<uint8_t>& out);
std::vector<Response> decode_responses(const uint8_t* data, size_t size);

}  // namespace hvdlite
