// One rank (controller.h, Note [solo rounds]): a repeated small all-reduce rides in a round
// that makes no transport call, and its bits equal those of the calls before it, which the
// coordinator and the executor ran, for every reduction, scaling and dtype tried.
#include <cstring>
#include <vector>

#include "engine/engine.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::Fabric;

struct Case {
  const char* what;
  DataType dtype;
  ReduceOp op;
  double prescale, postscale;
};

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint8_t> input_of(DataType dtype, size_t count) {
  if (dtype == DataType::Int32) {
    std::vector<int32_t> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = static_cast<int32_t>(i * 7) - 11;
    return bytes_of(x);
  }
  if (dtype == DataType::Float64) {
    std::vector<double> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = 0.1 * static_cast<double>(i) - 0.35;
    return bytes_of(x);
  }
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = 0.3f * static_cast<float>(i) - 1.7f;
  return bytes_of(x);
}

TEST(solo_rounds_reduce_alone_with_the_executors_bits) {
  const Case cases[] = {
      {"sum", DataType::Float32, ReduceOp::Sum, 1.0, 1.0},
      {"average, scaled", DataType::Float32, ReduceOp::Average, 0.37, 3.1},
      {"min", DataType::Float64, ReduceOp::Min, 1.0, 1.0},
      {"max, scaled", DataType::Float64, ReduceOp::Max, 2.5, 0.5},
      {"product", DataType::Float32, ReduceOp::Product, 1.0, 1.0},
      {"average of ints", DataType::Int32, ReduceOp::Average, 1.0, 0.5},
  };
  Fabric fabric(1);
  Config config;
  Engine eng(fabric.world(0), config);
  for (const Case& c : cases) {
    for (size_t count : {size_t(1), size_t(3), size_t(1000)}) {
      const std::string name = std::string(c.what) + "/" + std::to_string(count);
      const std::vector<uint8_t> input = input_of(c.dtype, count);
      std::vector<uint8_t> first;
      for (int call = 0; call < 5; ++call) {
        std::vector<uint8_t> x = input;
        auto e = std::make_unique<TensorEntry>();
        e->request.name = name;
        e->request.op = OpType::Allreduce;
        e->request.dtype = c.dtype;
        e->request.reduce_op = c.op;
        e->request.prescale = c.prescale;
        e->request.postscale = c.postscale;
        e->request.shape = {int64_t(count)};
        e->input = e->output = x.data();
        EntryList list;
        list.push_back(std::move(e));
        const size_t rounds_before = fabric.control_rounds.load();
        Outcome o = eng.wait(eng.enqueue(0, std::move(list))[0]);
        if (o.status != Status::Success) throw testing::Failure(name + " failed: " + o.error);
        // Call 0 asks the coordinator, call 1 agrees on the room, and from call 2 on the data
        // rides in the round. No round of any call goes through the transport.
        CHECK_EQ(fabric.control_rounds.load(), rounds_before);
        if (call == 0) {
          first = x;
        } else if (x != first) {
          throw testing::Failure(name + ", call " + std::to_string(call) +
                                 ": not the bits of the first call");
        }
      }
    }
  }
}

}  // namespace
}  // namespace hvdlite
