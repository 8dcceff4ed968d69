// The core's public vocabulary: status codes, data types, operations, and the error type.
// Everything else in csrc/ builds on these; bindings.cc turns Error into Python exceptions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace hvdlite {

// One status enum for every failure. Keep in sync with src/hvdlite/exceptions.py STATUS_TO_ERROR.
enum class Status : int {
  Success = 0,
  InvalidArgument = 1,  // bad local input, rejected before anything is sent
  NotInitialized = 2,   // library used before init() or after shutdown()
  Mismatch = 3,         // ranks disagree about one tensor (shape, dtype, op, root...)
  ShutDown = 4,         // a rank shut down while the operation was pending
  Internal = 5,         // the transport failed
  RanksLost = 6,        // a rank of the job died (elastic jobs recover: see Engine::rebuild)
  OutOfMemory = 7,      // a rank could not allocate an output; failed on every rank, job goes on
  Deadlock = 8,         // every member waits and none can proceed (deadlock.h): job goes on;
                        // ranks waiting across sets (cross_set_deadlock.h): hvdlite stops
  Timeout = 9,          // a wait's own time limit passed; the request stays in flight
};

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  Status status() const { return status_; }

 private:
  Status status_;
};

// bindings.cc's dtype table maps each to its DLPack code and name (the supported list).
enum class DataType : uint8_t {
  UInt8, Int8, Int32, Int64, Float16, BFloat16, Float32, Float64, Bool, Int16, UInt16,
};

enum class OpType : uint8_t {
  Allreduce, Allgather, Broadcast, Alltoall, Reducescatter, Barrier, Join,
  // Changes to the table of process sets: negotiated in the global set like any collective,
  // so every rank applies them at the same point of its sequence.
  AddProcessSet, RemoveProcessSet,
};

// Numbered as in Horovod's Python API. Adasum is not element-wise: it has an algorithm of its
// own (algorithms/adasum.h), which every other all-reduce path leaves to.
enum class ReduceOp : uint8_t { Average = 0, Sum = 1, Adasum = 2, Min = 3, Max = 4, Product = 5 };

// How floating-point all-reduce data travels on the wire.
enum class Compression : uint8_t { None = 0, FP16 = 1, BF16 = 2 };

size_t dtype_size(DataType dtype);
const char* dtype_name(DataType dtype);
const char* op_name(OpType op);
const char* reduce_op_name(ReduceOp op);
const char* compression_name(Compression c);
bool is_floating(DataType dtype);

}  // namespace hvdlite
