// Sizes and printable names of the core's enums (used in error messages).
#include "hvdlite.h"

namespace hvdlite {

size_t dtype_size(DataType dtype) {
  switch (dtype) {
    case DataType::UInt8: case DataType::Int8: case DataType::Bool: return 1;
    case DataType::Int16: case DataType::UInt16:
    case DataType::Float16: case DataType::BFloat16: return 2;
    case DataType::Int32: case DataType::Float32: return 4;
    case DataType::Int64: case DataType::Float64: return 8;
  }
  return 0;
}

const char* dtype_name(DataType dtype) {
  switch (dtype) {
    case DataType::UInt8: return "uint8";
    case DataType::Int8: return "int8";
    case DataType::Int16: return "int16";
    case DataType::UInt16: return "uint16";
    case DataType::Int32: return "int32";
    case DataType::Int64: return "int64";
    case DataType::Float16: return "float16";
    case DataType::BFloat16: return "bfloat16";
    case DataType::Float32: return "float32";
    case DataType::Float64: return "float64";
    case DataType::Bool: return "bool";
  }
  return "?";
}

const char* op_name(OpType op) {
  switch (op) {
    case OpType::Allreduce: return "allreduce";
    case OpType::Allgather: return "allgather";
    case OpType::Broadcast: return "broadcast";
    case OpType::Alltoall: return "alltoall";
    case OpType::Reducescatter: return "reducescatter";
    case OpType::Barrier: return "barrier";
    case OpType::Join: return "join";
    case OpType::AddProcessSet: return "add_process_set";
    case OpType::RemoveProcessSet: return "remove_process_set";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Average: return "Average";
    case ReduceOp::Sum: return "Sum";
    case ReduceOp::Adasum: return "Adasum";
    case ReduceOp::Min: return "Min";
    case ReduceOp::Max: return "Max";
    case ReduceOp::Product: return "Product";
  }
  return "?";
}

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::None: return "none";
    case Compression::FP16: return "fp16";
    case Compression::BF16: return "bf16";
  }
  return "?";
}

bool is_floating(DataType dtype) {
  return dtype == DataType::Float16 || dtype == DataType::BFloat16 ||
         dtype == DataType::Float32 || dtype == DataType::Float64;
}

}  // namespace hvdlite
