#include "device/nccl_collectives.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "device/device_context.h"
#include "device/nccl_library.h"

namespace hvdlite {
namespace device {
namespace {

int nccl_dtype(DataType dt) {
  switch (dt) {
    case DataType::UInt8: case DataType::Bool: return kNcclUint8;
    case DataType::Int8: return kNcclInt8;
    case DataType::Int32: return kNcclInt32;
    case DataType::Int64: return kNcclInt64;
    case DataType::Float16: return kNcclFloat16;
    case DataType::BFloat16: return kNcclBfloat16;
    case DataType::Float32: return kNcclFloat32;
    case DataType::Float64: return kNcclFloat64;
    default: return -1;  // 16-bit integers: NCCL has none
  }
}

int nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return kNcclSum;
    case ReduceOp::Average: return kNcclAvg;
    case ReduceOp::Min: return kNcclMin;
    case ReduceOp::Max: return kNcclMax;
    case ReduceOp::Product: return kNcclProd;
  }
  return kNcclSum;
}

class NcclCollectives : public DeviceCollectives {
 public:
  NcclCollectives(Transport& transport, const Membership& members, Complete complete,
                  OnError on_error)
      : transport_(transport), members_(members), complete_(std::move(complete)),
        on_error_(std::move(on_error)) {}

  ~NcclCollectives() override {
    stop_watchdog();
    if (comm_) {
      // A healthy communicator is destroyed after its work; a failed one was aborted.
      if (aborted_) return;
      cuda_->StreamSynchronize(context_->stream());
      api_->CommDestroy(comm_);
    }
  }

  void add(const Response& r, TensorEntry* e) override {
    if (!e) {
      // A joined rank has no tensor and no device to contribute zeros from (Limits, README).
      throw Error(Status::InvalidArgument,
                  "tensor '" + r.name + "' goes through NCCL, which hvdlite does not combine with "
                  "join() yet; set HVDLITE_GPU_OPERATIONS=mpi to use join with CUDA tensors");
    }
    ensure_comm(e->input_device, r.name);
    if (r.op == OpType::Allreduce) {
      const size_t bytes = e->bytes();
      for (auto& b : open_) {
        if (b.dtype == r.dtype && b.op == r.reduce_op) {
          b.members.push_back(e);
          b.bytes += bytes;
          return;
        }
      }
      open_.push_back(Batch{r.dtype, r.reduce_op, {e}, bytes});
      return;
    }
    if (r.op == OpType::Broadcast) {
      int root = 0;
      for (int m = 0; m < transport_.size(); ++m) {
        if (members_.global(m) == r.root) root = m;
      }
      const size_t count = e->bytes() / dtype_size(r.dtype);
      issue(api_->Broadcast(e->input, e->output, count, nccl_dtype(r.dtype), root, comm_,
                            context_->stream()), "ncclBroadcast of tensor '" + r.name + "'", {e});
      return;
    }
    complete_(e, Outcome{Status::Internal, std::string(op_name(r.op)) + " of tensor '" + r.name +
                         "' was routed to NCCL, which hvdlite runs only for allreduce and broadcast"});
  }

  void flush() override {
    for (Batch& b : open_) run(b);
    open_.clear();
  }

  void abort() override {
    std::lock_guard<std::mutex> lk(comm_mu_);
    if (comm_ && !aborted_) {
      aborted_ = true;
      api_->CommAbort(comm_);
    }
  }

 private:
  struct Batch {
    DataType dtype;
    ReduceOp op;
    std::vector<TensorEntry*> members;
    size_t bytes;
  };

  void ensure_comm(int device, const std::string& name) {
    if (comm_) {
      if (device != device_) {
        throw Error(Status::InvalidArgument,
                    "tensor '" + name + "' is on CUDA device " + std::to_string(device) + ", but this "
                    "rank's NCCL communicator" + members_.where() + " is on device " +
                    std::to_string(device_) + "; one rank uses one GPU");
      }
      return;
    }
    api_ = nccl();
    cuda_ = cuda_runtime();
    if (!api_ || !cuda_) throw Error(Status::Internal, "NCCL: " + nccl_library_info().error);
    device_ = device;
    context_ = &DeviceContext::get(*cuda_, device);
    // Every member reaches its first NCCL response at the same point of the agreed order.
    NcclUniqueId id{};
    if (transport_.rank() == 0) nccl_check(api_->GetUniqueId(&id), "ncclGetUniqueId");
    transport_.broadcast(&id, sizeof id, 0);
    DeviceGuard on(*cuda_, device);
    NcclComm comm = nullptr;
    nccl_check(api_->CommInitRank(&comm, transport_.size(), id, transport_.rank()),
               "ncclCommInitRank" + members_.where() + " (rank " + std::to_string(transport_.rank()) +
               " of " + std::to_string(transport_.size()) + ", CUDA device " + std::to_string(device) + ")");
    {
      std::lock_guard<std::mutex> lk(comm_mu_);
      comm_ = comm;
    }
    watchdog_ = std::thread([this] { watch(); });
  }

  // Checks a launch; the entries complete either way (with the error if it failed).
  void issue(int rc, const std::string& what, const std::vector<TensorEntry*>& entries) {
    std::string error;
    if (rc != kNcclSuccess && rc != kNcclInProgress) {
      try {
        nccl_check(rc, what);
      } catch (const Error& e) {
        error = e.what();
      }
    }
    for (TensorEntry* e : entries) {
      complete_(e, error.empty() ? Outcome{} : Outcome{Status::Internal, error});
    }
  }

  void run(Batch& b) {
    const int dt = nccl_dtype(b.dtype), op = nccl_op(b.op);
    const size_t es = dtype_size(b.dtype);
    const Stream stream = context_->stream();
    const std::string what = "ncclAllReduce of tensor '" + b.members[0]->request.name + "'" +
                             (b.members.size() > 1 ? " and " + std::to_string(b.members.size() - 1) + " more" : "");
    if (b.members.size() == 1) {
      TensorEntry* e = b.members[0];
      issue(api_->AllReduce(e->input, e->output, e->bytes() / es, dt, op, comm_, stream), what, b.members);
      return;
    }
    DeviceGuard on(*cuda_, device_);
    DeviceContext::Buffer fused = context_->acquire(b.bytes, false);
    char* at = static_cast<char*>(fused.data);
    for (TensorEntry* e : b.members) {
      check(cuda_->MemcpyAsync(at, e->input, e->bytes(), static_cast<int>(CopyKind::DeviceToDevice), stream),
            "cudaMemcpyAsync (into the device fusion buffer)");
      at += e->bytes();
    }
    const int rc = api_->AllReduce(fused.data, fused.data, b.bytes / es, dt, op, comm_, stream);
    at = static_cast<char*>(fused.data);
    for (TensorEntry* e : b.members) {
      check(cuda_->MemcpyAsync(e->output, at, e->bytes(), static_cast<int>(CopyKind::DeviceToDevice), stream),
            "cudaMemcpyAsync (out of the device fusion buffer)");
      at += e->bytes();
    }
    Event after = context_->new_event();
    check(cuda_->EventRecord(after, stream), "cudaEventRecord (device fusion buffer free)");
    context_->release(fused, after);
    issue(rc, what, b.members);
  }

  void watch() {
    std::unique_lock<std::mutex> lk(watch_mu_);
    while (!watch_stop_) {
      watch_cv_.wait_for(lk, std::chrono::milliseconds(10));
      if (watch_stop_) break;
      int error = kNcclSuccess;
      {
        std::lock_guard<std::mutex> c(comm_mu_);
        if (aborted_) break;
        api_->CommGetAsyncError(comm_, &error);
      }
      if (error != kNcclSuccess && error != kNcclInProgress) {
        const char* message = api_->GetErrorString(error);
        abort();
        lk.unlock();
        on_error_("NCCL reported an asynchronous error" + members_.where() + " (error " +
                  std::to_string(error) + (message ? std::string(": ") + message : "") +
                  "); its communicator was aborted");
        return;
      }
    }
  }

  void stop_watchdog() {
    {
      std::lock_guard<std::mutex> lk(watch_mu_);
      watch_stop_ = true;
    }
    watch_cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }

  Transport& transport_;
  Membership members_;
  Complete complete_;
  OnError on_error_;
  const NcclApi* api_ = nullptr;
  const CudaRuntime* cuda_ = nullptr;
  DeviceContext* context_ = nullptr;
  int device_ = -1;
  std::mutex comm_mu_;  // the communicator, between the group's thread and the watchdog
  NcclComm comm_ = nullptr;
  bool aborted_ = false;
  std::vector<Batch> open_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;
  std::thread watchdog_;
};

}  // namespace

bool nccl_can_run(const Request& r) {
  if (r.op == OpType::Broadcast) return nccl_dtype(r.dtype) >= 0;
  if (r.op != OpType::Allreduce) return false;
  // No kernel of ours scales or converts on the device: those stay on the host path.
  if (r.prescale != 1.0 || r.postscale != 1.0 || r.compression != Compression::None) return false;
  if (r.dtype == DataType::Bool || nccl_dtype(r.dtype) < 0) return false;
  // NCCL's average of integers truncates differently from the host path's: keep one answer.
  return r.reduce_op != ReduceOp::Average || is_floating(r.dtype);
}

std::unique_ptr<DeviceCollectives> make_nccl_collectives(Transport& transport,
                                                         const Membership& members,
                                                         DeviceCollectives::Complete complete,
                                                         DeviceCollectives::OnError on_error) {
  return std::make_unique<NcclCollectives>(transport, members, std::move(complete), std::move(on_error));
}

}  // namespace device
}  // namespace hvdlite
