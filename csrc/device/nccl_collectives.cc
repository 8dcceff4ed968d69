#include "device/nccl_collectives.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "algorithms/collectives.h"
#include "algorithms/hierarchical.h"
#include "algorithms/reduce.h"
#include "algorithms/ring_allreduce.h"
#include "device/device_context.h"
#include "device/device_outputs.h"
#include "device/nccl_library.h"
#include "engine/config.h"
#include "engine/rank_computing.h"

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
    case ReduceOp::Adasum: break;  // never reaches NCCL (nccl_can_run)
  }
  return kNcclSum;
}

// Bytes of one slice along dimension 0 (a 0-d tensor counts as one row).
size_t row_bytes(const std::vector<int64_t>& shape, DataType dtype) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return static_cast<size_t>(n) * dtype_size(dtype);
}

std::vector<int64_t> with_rows(std::vector<int64_t> shape, int64_t rows) {
  if (shape.empty()) shape.push_back(rows);
  else shape[0] = rows;
  return shape;
}

bool all_equal(const std::vector<size_t>& v) {
  for (size_t x : v) {
    if (x != v[0]) return false;
  }
  return true;
}

template <typename T>
std::vector<size_t> offsets_of(const std::vector<T>& sizes) {
  std::vector<size_t> at(sizes.size());
  size_t sum = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    at[i] = sum;
    sum += static_cast<size_t>(sizes[i]);
  }
  return at;
}

// Requests carried, by OpType (nccl_requests_run).
std::atomic<long> g_run[16];

void count_run(OpType op) { ++g_run[static_cast<int>(op) & 15]; }

class NcclCollectives : public DeviceCollectives {
 public:
  NcclCollectives(Transport& transport, const Membership& members, DeviceStages stages,
                  Complete complete, OnError on_error)
      : transport_(transport), members_(members), stages_(stages), complete_(std::move(complete)),
        on_error_(std::move(on_error)) {}

  ~NcclCollectives() override {
    stop_watchdog();
    // Healthy communicators are destroyed after their work; failed ones were aborted.
    if ((!comm_ && !local_) || aborted_) return;
    cuda_->StreamSynchronize(context_->stream());
    if (comm_) api_->CommDestroy(comm_);
    if (local_) api_->CommDestroy(local_);
  }

  void add(const Response& r, TensorEntry* e) override {
    if (!e) e = joined_zeros(r);
    ensure_device(e->input_device, r.name);
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
      issue(api_->Broadcast(e->input, e->output, count, nccl_dtype(r.dtype), root, global(),
                            context_->stream()), "ncclBroadcast of tensor '" + r.name + "'", {e});
      return;
    }
    if (r.op == OpType::Allgather) {
      gathers_.push_back(Gathered{e, r.first_dims});
      return;
    }
    if (r.op == OpType::Reducescatter) {
      for (auto& b : scatters_) {
        if (b.dtype == r.dtype && b.op == r.reduce_op) {
          b.members.push_back(e);
          return;
        }
      }
      scatters_.push_back(Batch{r.dtype, r.reduce_op, {e}, 0});
      return;
    }
    if (r.op == OpType::Alltoall) {
      run_alltoall(r, e);
      return;
    }
    complete_(e, Outcome{Status::Internal, std::string(op_name(r.op)) + " of tensor '" + r.name +
                         "' was routed to NCCL, which hvdlite does not run it on"});
  }

  // The same order on every rank: all-reduces, all-gathers, reduce-scatters.
  void flush() override {
    for (Batch& b : open_) run(b);
    open_.clear();
    if (!gathers_.empty()) run_allgather(gathers_);
    gathers_.clear();
    for (Batch& b : scatters_) run_reducescatter(b);
    scatters_.clear();
    release_joined_zeros();
  }

  void abort() override {
    std::lock_guard<std::mutex> lk(comm_mu_);
    if ((comm_ || local_) && !aborted_) {
      aborted_ = true;
      if (comm_) api_->CommAbort(comm_);
      if (local_) api_->CommAbort(local_);
    }
  }

 private:
  struct Batch {
    DataType dtype;
    ReduceOp op;
    std::vector<TensorEntry*> members;
    size_t bytes;
  };
  struct Gathered {
    TensorEntry* entry;
    std::vector<int64_t> first_dims;  // every member's dimension 0
  };
  struct Joined {  // Note [join over NCCL]
    std::unique_ptr<TensorEntry> entry;
    DeviceContext::Buffer buffer;
  };

  // Note [join over NCCL]
  // A rank that called join() has no tensor for the all-reduces the others still submit, but
  // NCCL needs every member in every call: it takes part with zeros (as Horovod's joined
  // ranks do), from a pooled device buffer cleared on hvdlite's stream, on the device its
  // communicator lives on. That entry has no handle to complete; its buffer goes back to the
  // pool once the stream is past the round's NCCL calls. Only all-reduce combines with join
  // (negotiation refuses the others, as on the CPU), and a rank must have used NCCL in the
  // set before it joins: otherwise it has no device to take part from.
  TensorEntry* joined_zeros(const Response& r) {
    if (r.op != OpType::Allreduce) {
      throw Error(Status::InvalidArgument,
                  std::string(op_name(r.op)) + " of tensor '" + r.name + "' reached a rank that "
                  "called join(); only all-reduce combines with join");
    }
    if (!context_) {
      throw Error(Status::InvalidArgument,
                  "tensor '" + r.name + "' goes through NCCL" + members_.where() + ", but this "
                  "rank called join() before any CUDA tensor of its own went through NCCL there, "
                  "so it has no GPU to take part with zeros from; submit one collective of a "
                  "CUDA tensor first, or set HVDLITE_GPU_OPERATIONS=mpi");
    }
    auto z = std::make_unique<TensorEntry>();
    z->request.name = r.name;
    z->request.op = OpType::Allreduce;
    z->request.dtype = r.dtype;
    z->request.shape = r.shape;
    z->input_device = z->output_device = device_;
    DeviceGuard on(*cuda_, device_);
    DeviceContext::Buffer b = context_->acquire(z->bytes(), false);
    check(cuda_->MemsetAsync(b.data, 0, z->bytes(), context_->stream()),
          "cudaMemsetAsync (a joined rank's zeros)");
    z->input = z->output = b.data;
    joined_.push_back(Joined{std::move(z), b});
    return joined_.back().entry.get();
  }

  bool is_joined_zeros(const TensorEntry* e) const {
    for (const Joined& j : joined_) {
      if (j.entry.get() == e) return true;
    }
    return false;
  }

  void release_joined_zeros() {
    if (joined_.empty()) return;
    DeviceGuard on(*cuda_, device_);
    for (Joined& j : joined_) {
      Event after = context_->new_event();
      check(cuda_->EventRecord(after, context_->stream()), "cudaEventRecord (a joined rank's zeros)");
      context_->release(j.buffer, after);
    }
    joined_.clear();
  }

  void ensure_device(int device, const std::string& name) {
    if (context_) {
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
  }

  // The set's communicator, and the one of its ranks on this host (hierarchical), each made
  // where first used: every member gets there at the same point of the agreed order.
  NcclComm global() {
    if (!comm_) comm_ = make_comm(transport_, "");
    return comm_;
  }
  NcclComm local() {
    if (!local_) local_ = make_comm(*stages_.hierarchy->intra, " (its ranks on this host)");
    return local_;
  }

  NcclComm make_comm(Transport& t, const std::string& which) {
    NcclUniqueId id{};
    if (t.rank() == 0) nccl_check(api_->GetUniqueId(&id), "ncclGetUniqueId");
    t.broadcast(&id, sizeof id, 0);
    DeviceGuard on(*cuda_, device_);
    NcclComm comm = nullptr;
    nccl_check(api_->CommInitRank(&comm, t.size(), id, t.rank()),
               "ncclCommInitRank" + members_.where() + which + " (rank " + std::to_string(t.rank()) +
               " of " + std::to_string(t.size()) + ", CUDA device " + std::to_string(device_) + ")");
    {
      std::lock_guard<std::mutex> lk(comm_mu_);
      (&t == &transport_ ? comm_ : local_) = comm;
    }
    if (!watchdog_.joinable()) watchdog_ = std::thread([this] { watch(); });
    return comm;
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
      if (is_joined_zeros(e)) continue;  // nobody waits for it
      if (error.empty()) count_run(e->request.op);
      complete_(e, error.empty() ? Outcome{} : Outcome{Status::Internal, error});
    }
  }

  void run(Batch& b) {
    if (stages_.hierarchy && stages_.config->hierarchical_allreduce != 0) {  // autotune may turn it off
      run_hierarchical(b);
      return;
    }
    const NcclComm comm = global();
    const int dt = nccl_dtype(b.dtype), op = nccl_op(b.op);
    const size_t es = dtype_size(b.dtype);
    const Stream stream = context_->stream();
    const std::string what = "ncclAllReduce of tensor '" + b.members[0]->request.name + "'" +
                             (b.members.size() > 1 ? " and " + std::to_string(b.members.size() - 1) + " more" : "");
    if (b.members.size() == 1) {
      TensorEntry* e = b.members[0];
      issue(api_->AllReduce(e->input, e->output, e->bytes() / es, dt, op, comm, stream), what, b.members);
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
    const int rc = api_->AllReduce(fused.data, fused.data, b.bytes / es, dt, op, comm, stream);
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

  // Runs NCCL calls between ncclGroupStart and ncclGroupEnd (NCCL issues them as one); the
  // first failing return code, or GroupEnd's.
  template <typename Calls>
  int grouped(Calls&& calls) {
    int rc = api_->GroupStart();
    if (rc != kNcclSuccess) return rc;
    const int inner = calls();
    rc = api_->GroupEnd();
    return inner != kNcclSuccess && inner != kNcclInProgress ? inner : rc;
  }

  void copy(void* dst, const void* src, size_t bytes, const char* what) {
    if (bytes == 0) return;
    check(cuda_->MemcpyAsync(dst, src, bytes, static_cast<int>(CopyKind::DeviceToDevice), context_->stream()), what);
  }

  // Device memory for a caller's output, from the device's pool (device_outputs.h), or an
  // Error the agreement below turns into a failure on every rank.
  OwnedBuffer device_output(size_t bytes) { return take_device_output(*context_, bytes); }

  // Fusion buffers taken for one batch, returned after the stream's last use of them (or at
  // once when an error leaves the batch: its communicators were aborted).
  struct Scratch {
    DeviceContext* context = nullptr;
    std::vector<DeviceContext::Buffer> buffers;
    ~Scratch() {
      for (auto& b : buffers) context->release(b, nullptr);
    }
    void* take(size_t bytes, bool pinned = false) {
      buffers.push_back(context->acquire(bytes, pinned));
      return buffers.back().data;
    }
    void give_back(const CudaRuntime& cuda, bool after_stream) {
      for (auto& b : buffers) {
        Event after = nullptr;
        if (after_stream) {
          after = context->new_event();
          check(cuda.EventRecord(after, context->stream()), "cudaEventRecord (device fusion buffer free)");
        }
        context->release(b, after);
      }
      buffers.clear();
    }
  };

  // Allocates every output (and fusion buffer) of a batch, agreed across the members when
  // large (Note [agreed allocations]); false when some rank failed: each entry completed with
  // the error naming the ranks, on every rank.
  bool allocate(const std::vector<TensorEntry*>& entries, size_t bytes, Scratch& scratch,
                const std::function<void()>& allocate_all, const std::string& what) {
    std::vector<int> failed = allocate_agreed(transport_, bytes >= kAgreedAllocationBytes, members_, [&] {
      DeviceGuard on(*cuda_, device_);
      allocate_all();
    });
    if (failed.empty()) return true;
    scratch.give_back(*cuda_, false);
    for (TensorEntry* e : entries) {
      complete_(e, out_of_memory(failed, what + " on CUDA device " + std::to_string(device_), e->request, members_));
    }
    return false;
  }

  static std::string batch_name(const char* call, const std::vector<TensorEntry*>& entries) {
    return std::string(call) + " of tensor '" + entries[0]->request.name + "'" +
           (entries.size() > 1 ? " and " + std::to_string(entries.size() - 1) + " more" : "");
  }

  // Completes each entry with its device output, or every one with NCCL's error.
  void finish(int rc, const std::string& what, const std::vector<TensorEntry*>& entries,
              std::vector<Outcome>& outcomes) {
    if (rc != kNcclSuccess && rc != kNcclInProgress) {
      issue(rc, what, entries);  // the outputs are freed with their outcomes
      return;
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      count_run(entries[i]->request.op);
      outcomes[i].output_device = device_;
      complete_(entries[i], std::move(outcomes[i]));
    }
  }

  // Blocks the group's thread until the work queued so far on hvdlite's stream is done, or
  // throws once the communicators were aborted (the watchdog saw NCCL's error) meanwhile.
  void wait_for_stream(const char* what) {
    Event done = context_->new_event();
    check(cuda_->EventRecord(done, context_->stream()), "cudaEventRecord (before the host stage)");
    while (true) {
      const int rc = cuda_->EventQuery(done);
      if (rc == kSuccess) break;
      bool aborted;
      {
        std::lock_guard<std::mutex> lk(comm_mu_);
        aborted = aborted_;
      }
      if (rc != kErrorNotReady || aborted) {
        cuda_->EventDestroy(done);
        if (rc != kErrorNotReady) check(rc, what);
        throw Error(Status::Internal, std::string("NCCL: ") + what + ": its communicator was aborted "
                    "(an NCCL error) while the host waited for the device");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    cuda_->EventDestroy(done);
  }

  // Note [NCCL hierarchical all-reduce]
  // As Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE with NCCL: the batch, fused and padded with
  // zeros to a multiple of the host's rank count L, is reduce-scattered within the host
  // (ncclReduceScatter on the host's communicator); this rank's shard goes to pinned host
  // memory and is all-reduced across hosts by the host ring among the ranks with its local
  // rank (the hierarchy's cross transport); it comes back and the shards are all-gathered
  // within the host (ncclAllGather, in place). Average sums on the device and divides once,
  // in the cross-host ring. The group's thread waits for the device before the host stage.
  void run_hierarchical(Batch& b) {
    Hierarchy& h = *stages_.hierarchy;
    const NcclComm comm = local();
    const size_t local_size = static_cast<size_t>(h.intra->size()), lr = static_cast<size_t>(h.intra->rank());
    const size_t es = dtype_size(b.dtype), count = b.bytes / es;
    const size_t shard = (count + local_size - 1) / local_size, padded = shard * local_size;
    const int dt = nccl_dtype(b.dtype), op = b.op == ReduceOp::Average ? kNcclSum : nccl_op(b.op);
    const std::string what = batch_name("hierarchical all-reduce", b.members);
    DeviceGuard on(*cuda_, device_);
    const Stream stream = context_->stream();
    Scratch scratch{context_};
    char* fused = static_cast<char*>(scratch.take(padded * es));
    char* mine = fused + lr * shard * es;
    char* at = fused;
    for (TensorEntry* e : b.members) {
      copy(at, e->input, e->bytes(), "cudaMemcpyAsync (into the device fusion buffer)");
      at += e->bytes();
    }
    if (padded > count) {
      void* zeros = scratch.take((padded - count) * es, true);
      std::memset(zeros, 0, (padded - count) * es);
      check(cuda_->MemcpyAsync(at, zeros, (padded - count) * es, static_cast<int>(CopyKind::HostToDevice), stream),
            "cudaMemcpyAsync (the fusion buffer's padding)");
    }
    int rc = shard ? api_->ReduceScatter(fused, mine, shard, dt, op, comm, stream) : kNcclSuccess;
    if (rc == kNcclSuccess || rc == kNcclInProgress) {
      void* host = scratch.take(shard * es, true);
      check(cuda_->MemcpyAsync(host, mine, shard * es, static_cast<int>(CopyKind::DeviceToHost), stream),
            "cudaMemcpyAsync (this rank's shard to pinned memory)");
      wait_for_stream("the reduce-scatter within the host");
      ring_allreduce(*h.cross, SpanBuffer({{host, shard}}, es), b.dtype, b.op,
                     applied_postscale(b.op, 1.0, transport_.size()), cross_scratch_,
                     stages_.config->ring_piece_bytes);
      check(cuda_->MemcpyAsync(mine, host, shard * es, static_cast<int>(CopyKind::HostToDevice), stream),
            "cudaMemcpyAsync (the shard back to the device)");
      rc = shard ? api_->AllGather(mine, fused, shard, dt, comm, stream) : kNcclSuccess;
    }
    at = fused;
    for (TensorEntry* e : b.members) {
      copy(e->output, at, e->bytes(), "cudaMemcpyAsync (out of the device fusion buffer)");
      at += e->bytes();
    }
    scratch.give_back(*cuda_, true);
    issue(rc, what, b.members);
  }

  // Note [NCCL all-gather]
  // Dimension 0 may differ across members (Horovod allows it). Each member's part is its
  // tensors back to back; when every member's part has the same size, one ncclAllGather moves
  // them, else one ncclBroadcast per member in a group (rooted at that member). Several
  // tensors are fused into a device fusion buffer first, and each output is then assembled
  // from every member's part with device-to-device copies.
  void run_allgather(const std::vector<Gathered>& batch) {
    const int n = transport_.size(), me = transport_.rank();
    std::vector<TensorEntry*> entries;
    std::vector<size_t> part(n, 0);                  // bytes of each member's part
    std::vector<std::vector<size_t>> inner(n);       // [member][tensor]: offset in that part
    std::vector<size_t> out_bytes;
    size_t total_out = 0;
    for (const Gathered& g : batch) {
      entries.push_back(g.entry);
      const size_t rb = row_bytes(g.entry->request.shape, g.entry->request.dtype);
      size_t out = 0;
      for (int r = 0; r < n; ++r) {
        inner[r].push_back(part[r]);
        part[r] += static_cast<size_t>(g.first_dims[r]) * rb;
        out += static_cast<size_t>(g.first_dims[r]) * rb;
      }
      out_bytes.push_back(out);
      total_out += out;
    }
    const std::vector<size_t> at = offsets_of(part);
    const bool fused = batch.size() > 1;
    std::vector<Outcome> outcomes(batch.size());
    Scratch scratch{context_};
    void* send = nullptr;
    char* recv = nullptr;
    if (!allocate(entries, total_out, scratch, [&] {
          for (size_t k = 0; k < batch.size(); ++k) outcomes[k].output = device_output(out_bytes[k]);
          send = fused ? scratch.take(part[me]) : const_cast<void*>(batch[0].entry->input);
          recv = static_cast<char*>(fused ? scratch.take(total_out) : outcomes[0].output.data);
        }, "the all-gather's output")) {
      return;
    }
    const NcclComm comm = global();
    DeviceGuard on(*cuda_, device_);
    const Stream stream = context_->stream();
    if (fused) {
      for (size_t k = 0; k < batch.size(); ++k) {
        copy(static_cast<char*>(send) + inner[me][k], batch[k].entry->input, batch[k].entry->bytes(),
             "cudaMemcpyAsync (into the device fusion buffer)");
      }
    }
    int rc = kNcclSuccess;
    if (total_out > 0) {
      if (all_equal(part)) {
        rc = api_->AllGather(send, recv, part[me], kNcclUint8, comm, stream);
      } else {
        rc = grouped([&] {
          for (int r = 0; r < n; ++r) {
            if (part[r] == 0) continue;
            const int one = api_->Broadcast(r == me ? send : recv + at[r], recv + at[r], part[r], kNcclUint8, r, comm, stream);
            if (one != kNcclSuccess && one != kNcclInProgress) return one;
          }
          return kNcclSuccess;
        });
      }
    }
    for (size_t k = 0; k < batch.size(); ++k) {
      const TensorEntry& e = *batch[k].entry;
      const size_t rb = row_bytes(e.request.shape, e.request.dtype);
      int64_t rows = 0;
      char* out = static_cast<char*>(outcomes[k].output.data);
      for (int r = 0; r < n; ++r) {
        const size_t bytes = static_cast<size_t>(batch[k].first_dims[r]) * rb;
        if (fused) copy(out, recv + at[r] + inner[r][k], bytes, "cudaMemcpyAsync (out of the device fusion buffer)");
        out += bytes;
        rows += batch[k].first_dims[r];
      }
      outcomes[k].output_shape = with_rows(e.request.shape, rows);
      outcomes[k].output_dtype = e.request.dtype;
    }
    scratch.give_back(*cuda_, true);
    finish(rc, batch_name(all_equal(part) ? "ncclAllGather" : "grouped ncclBroadcast (all-gather)", entries), entries, outcomes);
  }

  // Note [NCCL reduce-scatter]
  // Dimension 0 is split as on the host path (the first rows % size members get one more
  // row). Member r's share of every tensor in the batch, back to back, is segment r of the
  // (fused) input; equal segments go through one ncclReduceScatter, unequal ones through one
  // ncclReduce per member, rooted at it, in a group.
  void run_reducescatter(const Batch& b) {
    const int n = transport_.size(), me = transport_.rank();
    const size_t es = dtype_size(b.dtype);
    const std::vector<TensorEntry*>& entries = b.members;
    std::vector<size_t> segment(n, 0);            // elements of each member's segment
    std::vector<std::vector<size_t>> counts;      // [tensor][member] elements
    std::vector<std::vector<size_t>> inner(n);    // [member][tensor] offset in its segment
    size_t total = 0;
    for (TensorEntry* e : entries) {
      const size_t row = row_bytes(e->request.shape, b.dtype) / es;
      std::vector<int64_t> rows = reducescatter_rows(e->request.shape[0], n);
      std::vector<size_t> c(n);
      for (int r = 0; r < n; ++r) {
        c[r] = static_cast<size_t>(rows[r]) * row;
        inner[r].push_back(segment[r]);
        segment[r] += c[r];
        total += c[r];
      }
      counts.push_back(std::move(c));
    }
    const std::vector<size_t> at = offsets_of(segment);
    const bool fused = entries.size() > 1;
    std::vector<Outcome> outcomes(entries.size());
    Scratch scratch{context_};
    char* send = nullptr;
    char* recv = nullptr;
    if (!allocate(entries, total * es, scratch, [&] {
          for (size_t k = 0; k < entries.size(); ++k) outcomes[k].output = device_output(counts[k][me] * es);
          send = static_cast<char*>(fused ? scratch.take(total * es) : const_cast<void*>(entries[0]->input));
          recv = static_cast<char*>(fused ? scratch.take(segment[me] * es) : outcomes[0].output.data);
        }, "the reduce-scatter's output")) {
      return;
    }
    const NcclComm comm = global();
    DeviceGuard on(*cuda_, device_);
    const Stream stream = context_->stream();
    if (fused) {
      for (size_t k = 0; k < entries.size(); ++k) {
        const char* in = static_cast<const char*>(entries[k]->input);
        for (int r = 0; r < n; ++r) {
          copy(send + (at[r] + inner[r][k]) * es, in, counts[k][r] * es, "cudaMemcpyAsync (into the device fusion buffer)");
          in += counts[k][r] * es;
        }
      }
    }
    const int dt = nccl_dtype(b.dtype), op = nccl_op(b.op);
    int rc = kNcclSuccess;
    if (total > 0) {
      if (all_equal(segment)) {
        rc = api_->ReduceScatter(send, recv, segment[me], dt, op, comm, stream);
      } else {
        rc = grouped([&] {
          for (int r = 0; r < n; ++r) {
            if (segment[r] == 0) continue;
            const int one = api_->Reduce(send + at[r] * es, r == me ? recv : send + at[r] * es, segment[r], dt, op, r, comm, stream);
            if (one != kNcclSuccess && one != kNcclInProgress) return one;
          }
          return kNcclSuccess;
        });
      }
    }
    for (size_t k = 0; k < entries.size(); ++k) {
      if (fused) copy(outcomes[k].output.data, recv + inner[me][k] * es, counts[k][me] * es, "cudaMemcpyAsync (out of the device fusion buffer)");
      outcomes[k].output_shape = with_rows(entries[k]->request.shape, reducescatter_rows(entries[k]->request.shape[0], n)[me]);
      outcomes[k].output_dtype = b.dtype;
    }
    scratch.give_back(*cuda_, true);
    finish(rc, batch_name(all_equal(segment) ? "ncclReduceScatter" : "grouped ncclReduce (reduce-scatter)", entries), entries, outcomes);
  }

  // All-to-all: the counts travel over the host transport (as negotiation does), the rows as
  // one group of ncclSend/ncclRecv; pairs with nothing to move make no call.
  void run_alltoall(const Response& r, TensorEntry* e) {
    const int n = transport_.size();
    const size_t rb = row_bytes(e->request.shape, e->request.dtype);
    int64_t all_rows = 0;
    for (int64_t rows : r.first_dims) all_rows += rows;
    std::vector<int64_t> recv_rows = transport_.alltoall_counts(e->splits);
    std::vector<size_t> send_bytes(n), recv_bytes(n);
    int64_t rows = 0;
    for (int p = 0; p < n; ++p) {
      send_bytes[p] = static_cast<size_t>(e->splits[p]) * rb;
      recv_bytes[p] = static_cast<size_t>(recv_rows[p]) * rb;
      rows += recv_rows[p];
    }
    const std::vector<size_t> send_at = offsets_of(send_bytes), recv_at = offsets_of(recv_bytes);
    std::vector<Outcome> outcomes(1);
    Scratch scratch{context_};
    // Every member knows every input's size: the same decision to agree everywhere.
    if (!allocate({e}, static_cast<size_t>(all_rows) * rb, scratch, [&] {
          outcomes[0].output = device_output(static_cast<size_t>(rows) * rb);
        }, "the all-to-all's output")) {
      return;
    }
    const NcclComm comm = global();
    DeviceGuard on(*cuda_, device_);
    const Stream stream = context_->stream();
    const char* in = static_cast<const char*>(e->input);
    char* out = static_cast<char*>(outcomes[0].output.data);
    const int rc = grouped([&] {
      for (int p = 0; p < n; ++p) {
        if (send_bytes[p]) {
          const int one = api_->Send(in + send_at[p], send_bytes[p], kNcclUint8, p, comm, stream);
          if (one != kNcclSuccess && one != kNcclInProgress) return one;
        }
        if (recv_bytes[p]) {
          const int one = api_->Recv(out + recv_at[p], recv_bytes[p], kNcclUint8, p, comm, stream);
          if (one != kNcclSuccess && one != kNcclInProgress) return one;
        }
      }
      return kNcclSuccess;
    });
    outcomes[0].output_shape = with_rows(e->request.shape, rows);
    outcomes[0].output_dtype = e->request.dtype;
    outcomes[0].received_splits = recv_rows;
    finish(rc, "grouped ncclSend/ncclRecv (all-to-all) of tensor '" + r.name + "'", {e}, outcomes);
  }

  void watch() {
    HvdliteThread::mark_for_life();  // Note [computing ranks]
    std::unique_lock<std::mutex> lk(watch_mu_);
    while (!watch_stop_) {
      watch_cv_.wait_for(lk, std::chrono::milliseconds(10));
      if (watch_stop_) break;
      int error = kNcclSuccess;
      {
        std::lock_guard<std::mutex> c(comm_mu_);
        if (aborted_) break;
        if (comm_) api_->CommGetAsyncError(comm_, &error);
        if (local_ && (error == kNcclSuccess || error == kNcclInProgress)) api_->CommGetAsyncError(local_, &error);
      }
      if (error != kNcclSuccess && error != kNcclInProgress) {
        const char* message = api_->GetErrorString(error);
        abort();
        lk.unlock();
        on_error_("NCCL reported an asynchronous error on rank " + std::to_string(members_.global(transport_.rank())) +
                  members_.where() + " (error " +
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
  DeviceStages stages_;
  Complete complete_;
  OnError on_error_;
  const NcclApi* api_ = nullptr;
  const CudaRuntime* cuda_ = nullptr;
  DeviceContext* context_ = nullptr;
  int device_ = -1;
  std::mutex comm_mu_;  // the communicator, between the group's thread and the watchdog
  NcclComm comm_ = nullptr;   // the set's
  NcclComm local_ = nullptr;  // its ranks on this host (hierarchical all-reduce)
  bool aborted_ = false;
  std::vector<Batch> open_;       // all-reduces, by dtype and op
  std::vector<Gathered> gathers_;  // all-gathers (moved as bytes: one batch)
  std::vector<Batch> scatters_;    // reduce-scatters, by dtype and op
  std::vector<Joined> joined_;     // this round's zeros of a joined rank (Note [join over NCCL])
  std::vector<uint8_t> cross_scratch_;  // the cross-host ring's (hierarchical)
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;
  std::thread watchdog_;
};

}  // namespace

bool nccl_can_run(const Request& r) {
  // Moved as bytes: any dtype.
  if (r.op == OpType::Allgather || r.op == OpType::Alltoall) return true;
  if (r.op == OpType::Broadcast) return nccl_dtype(r.dtype) >= 0;
  if (r.op != OpType::Allreduce && r.op != OpType::Reducescatter) return false;
  // No kernel of ours scales or converts on the device: those stay on the host path.
  if (r.prescale != 1.0 || r.postscale != 1.0 || r.compression != Compression::None) return false;
  if (r.dtype == DataType::Bool || nccl_dtype(r.dtype) < 0) return false;
  // Adasum is no NCCL reduction: its CUDA tensors are staged and reduced on the host.
  if (r.reduce_op == ReduceOp::Adasum) return false;
  // NCCL's average of integers truncates differently from the host path's: keep one answer.
  return r.reduce_op != ReduceOp::Average || is_floating(r.dtype);
}

std::vector<std::pair<std::string, long>> nccl_requests_run() {
  std::vector<std::pair<std::string, long>> out;
  for (OpType op : {OpType::Allreduce, OpType::Broadcast, OpType::Allgather, OpType::Reducescatter,
                    OpType::Alltoall}) {
    out.emplace_back(op_name(op), g_run[static_cast<int>(op) & 15].load());
  }
  return out;
}

std::unique_ptr<DeviceCollectives> make_nccl_collectives(Transport& transport,
                                                         const Membership& members,
                                                         DeviceStages stages,
                                                         DeviceCollectives::Complete complete,
                                                         DeviceCollectives::OnError on_error) {
  return std::make_unique<NcclCollectives>(transport, members, stages, std::move(complete),
                                           std::move(on_error));
}

}  // namespace device
}  // namespace hvdlite
