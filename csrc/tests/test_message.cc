// The control-message codec: every field survives a round trip; truncated bytes are an error.
#include "engine/message.h"
#include "harness.h"

namespace hvdlite {
namespace {

TEST(codec_round_trips_requests) {
  Request a;
  a.name = "layer.0/weight";
  a.op = OpType::Reducescatter;
  a.dtype = DataType::BFloat16;
  a.reduce_op = ReduceOp::Max;
  a.compression = Compression::FP16;
  a.prescale = 0.25;
  a.postscale = 3.0;
  a.root = 2;
  a.nccl = true;
  a.shape = {7, 0, 3};
  a.process_set = 5;
  a.rank = 1;
  a.join_round = 1234567890123;
  Request b;
  b.name = "";
  b.op = OpType::Join;
  std::vector<uint8_t> bytes;
  encode_requests({a, b}, bytes);
  auto out = decode_requests(bytes.data(), bytes.size());
  CHECK_EQ(out.size(), size_t(2));
  const Request& r = out[0];
  CHECK_EQ(r.name, a.name);
  CHECK(r.op == a.op && r.dtype == a.dtype && r.reduce_op == a.reduce_op && r.compression == a.compression);
  CHECK(r.prescale == a.prescale && r.postscale == a.postscale && r.root == a.root);
  CHECK(r.nccl);
  CHECK(r.shape == a.shape);
  CHECK_EQ(r.process_set, 5);
  CHECK_EQ(r.rank, 1);
  CHECK_EQ(r.join_round, a.join_round);
  CHECK(out[1].op == OpType::Join && out[1].name.empty() && out[1].shape.empty());
  CHECK(decode_requests(nullptr, 0).empty());
}

TEST(codec_round_trips_responses) {
  Response a;
  a.name = "g";
  a.op = OpType::Allgather;
  a.shape = {2, 2};
  a.first_dims = {2, 0, 9};
  a.last_joined_rank = 3;
  a.error_status = Status::Mismatch;
  a.error = "Mismatched shapes: rank 0 has [1]";
  std::vector<uint8_t> bytes;
  encode_responses({a, Response{}}, bytes);
  auto out = decode_responses(bytes.data(), bytes.size());
  CHECK_EQ(out.size(), size_t(2));
  CHECK_EQ(out[0].name, a.name);
  CHECK(out[0].first_dims == a.first_dims && out[0].shape == a.shape);
  CHECK_EQ(out[0].last_joined_rank, 3);
  CHECK(out[0].error_status == Status::Mismatch);
  CHECK_EQ(out[0].error, a.error);
  CHECK(out[1].ok());
}

TEST(codec_rejects_truncated_messages) {
  Request a;
  a.name = "truncate.me";
  a.shape = {1, 2, 3};
  std::vector<uint8_t> bytes;
  encode_requests({a}, bytes);
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    CHECK_THROWS(decode_requests(bytes.data(), cut), Status::Internal, "truncated");
  }
}

}  // namespace
}  // namespace hvdlite
