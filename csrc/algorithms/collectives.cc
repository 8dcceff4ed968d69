#include "algorithms/collectives.h"

// Note [agreed allocations]: see collectives.h.

#include <cstring>
#include <new>
#include <string>
#include <thread>

#include "algorithms/reduce.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/shm_collectives_nranks.h"
#include "observability/timeline.h"

namespace hvdlite {
namespace {

// Bytes of one slice along dimension 0 (a 0-d tensor counts as one row).
size_t row_bytes(const std::vector<int64_t>& shape, DataType dtype) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return static_cast<size_t>(n) * dtype_size(dtype);
}

std::vector<int64_t> with_rows(const std::vector<int64_t>& shape, int64_t rows) {
  std::vector<int64_t> out = shape.empty() ? std::vector<int64_t>{rows} : shape;
  out[0] = rows;
  return out;
}

// e.g. sized("the", 100663296, "output", Float64): "the 96 MiB output (100663296 bytes of float64)"
std::string sized(const std::string& before, size_t bytes, const std::string& noun, DataType dtype) {
  return before + " " + std::to_string(bytes >> 20) + " MiB" + (noun.empty() ? "" : " " + noun) + " (" +
         std::to_string(bytes) + " bytes of " + dtype_name(dtype) + ")";
}

}  // namespace

std::vector<int> allocate_agreed(Transport& t, bool agree, const Membership& members,
                                 const std::function<void()>& allocate) {
  if (!agree) {
    allocate();
    return {};
  }
  bool ok = true;
  try {
    allocate();
  } catch (const Error&) {
    ok = false;
  } catch (const std::bad_alloc&) {
    ok = false;
  }
  // One bit per rank, cleared by a rank whose allocation failed.
  std::vector<uint64_t> words((static_cast<size_t>(t.size()) + 63) / 64, ~uint64_t(0));
  if (!ok) words[t.rank() / 64] &= ~(uint64_t(1) << (t.rank() % 64));
  t.start_control_and(words.data(), words.size());
  while (!t.test_control()) std::this_thread::yield();
  std::vector<int> failed;
  for (int r = 0; r < t.size(); ++r) {
    if (!((words[r / 64] >> (r % 64)) & 1)) failed.push_back(members.global(r));
  }
  return failed;
}

Outcome out_of_memory(const std::vector<int>& failed, const std::string& what,
                      const Request& request, const Membership& members) {
  std::string ranks = failed.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < failed.size(); ++i) ranks += (i ? ", " : "") + std::to_string(failed[i]);
  return Outcome{Status::OutOfMemory,
                 std::string(op_name(request.op)) + " '" + request.name + "': " + ranks +
                 " could not allocate " + what + ": out of memory; the request failed on every "
                 "rank" + members.where() + " before any data was sent"};
}

std::vector<int64_t> reducescatter_rows(int64_t rows, int size) {
  std::vector<int64_t> out(size, rows / size);
  for (int r = 0; r < rows % size; ++r) ++out[r];
  return out;
}

Outcome run_broadcast(Transport& t, const Response& r, TensorEntry& e, bool shared_memory) {
  if (t.rank() == r.root && e.input != e.output) std::memcpy(e.output, e.input, e.bytes());
  if (shared_memory) shm_broadcast_nranks(t, e.output, e.bytes(), r.root);
  else t.broadcast(e.output, e.bytes(), r.root);
  return Outcome{};
}

// Note [outputs the caller gives]
// An all-gather's or reduce-scatter's output size is known only once every rank's shape is,
// so the core allocates it, and the caller copies it where it wants it (c10d's
// all_gather_into_tensor, FSDP's reduce-scatter). A caller that knows the size gives its own
// output instead: the result lands there, with no allocation (fresh pages, faulted in on
// every call) and no copy. An output of the wrong size is not written: the collective still
// runs (the other ranks need this rank's part), into a buffer of the core's, and the request
// fails on this rank naming both sizes.
namespace {

void* given_output(const TensorEntry& e, size_t bytes) {
  return e.output_given && e.output_bytes == bytes ? e.output : nullptr;
}

Outcome wrong_output_size(const TensorEntry& e, size_t bytes, Outcome done) {
  if (!e.output_given || e.output_bytes == bytes || done.status != Status::Success) return done;
  return Outcome{Status::InvalidArgument,
                 std::string(op_name(e.request.op)) + " '" + e.request.name + "': the output given "
                 "holds " + std::to_string(e.output_bytes) + " bytes, but this rank's result is " +
                 std::to_string(bytes) + " bytes (" + dtype_name(e.request.dtype) +
                 shape_string(done.output_shape) + "); the output was left untouched"};
}

}  // namespace

Outcome run_allgather(Transport& t, const Response& r, TensorEntry& e, const Membership& members,
                      bool shared_memory) {
  const size_t rb = row_bytes(e.request.shape, e.request.dtype);
  std::vector<size_t> bytes(t.size());
  int64_t rows = 0;
  for (int i = 0; i < t.size(); ++i) {
    bytes[i] = static_cast<size_t>(r.first_dims[i]) * rb;
    rows += r.first_dims[i];
  }
  const size_t total = static_cast<size_t>(rows) * rb;  // the same on every rank
  Outcome out;
  void* dst = given_output(e, total);
  std::vector<int> failed = allocate_agreed(t, total >= kAgreedAllocationBytes, members, [&] {
    if (!dst) dst = (out.output = OwnedBuffer(total)).data;
  });
  if (!failed.empty()) {
    return out_of_memory(failed, sized("the", total, "output", e.request.dtype),
                         e.request, members);
  }
  out.output_shape = with_rows(e.request.shape, rows);
  out.output_dtype = e.request.dtype;
  if (shared_memory) shm_allgatherv_nranks(t, e.input, dst, bytes);
  else t.allgatherv(e.input, bytes[t.rank()], dst, bytes);
  return wrong_output_size(e, total, std::move(out));
}

Outcome run_alltoall(Transport& t, const Response& r, TensorEntry& e, const Membership& members) {
  const size_t rb = row_bytes(e.request.shape, e.request.dtype);
  // Every rank's input size is in the response, so every rank decides alike whether to agree
  // on the outputs (each rank's output is at most all the inputs together).
  int64_t all_rows = 0;
  for (int64_t n : r.first_dims) all_rows += n;
  const bool agree = static_cast<size_t>(all_rows) * rb >= kAgreedAllocationBytes;
  std::vector<int64_t> recv_rows = t.alltoall_counts(e.splits);
  std::vector<size_t> send_bytes(t.size()), recv_bytes(t.size());
  int64_t rows = 0;
  for (int i = 0; i < t.size(); ++i) {
    send_bytes[i] = static_cast<size_t>(e.splits[i]) * rb;
    recv_bytes[i] = static_cast<size_t>(recv_rows[i]) * rb;
    rows += recv_rows[i];
  }
  const size_t total = static_cast<size_t>(rows) * rb;
  Outcome out;
  std::vector<int> failed = allocate_agreed(t, agree, members,
                                            [&] { out.output = OwnedBuffer(total); });
  if (!failed.empty()) {
    return out_of_memory(failed, "the data it receives (the inputs of all ranks together are" +
                         sized("", static_cast<size_t>(all_rows) * rb, "", e.request.dtype) + ")",
                         e.request, members);
  }
  out.output_shape = with_rows(e.request.shape, rows);
  out.output_dtype = e.request.dtype;
  out.received_splits = recv_rows;
  t.alltoallv(e.input, send_bytes, out.output.data, recv_bytes);
  return out;
}

Outcome run_reducescatter(Transport& t, const Response& r, TensorEntry& e,
                          std::vector<uint8_t>& work, std::vector<uint8_t>& scratch,
                          size_t piece_bytes, const Membership& members, bool shared_memory) {
  const DataType dt = e.request.dtype;
  const size_t es = dtype_size(dt);
  const size_t row_elems = row_bytes(e.request.shape, dt) / es;
  const size_t total = static_cast<size_t>(num_elements(e.request.shape));
  std::vector<int64_t> rows = reducescatter_rows(e.request.shape[0], t.size());
  Segments segs;
  size_t at = 0;
  for (int64_t n : rows) {
    segs.offset.push_back(at);
    segs.count.push_back(static_cast<size_t>(n) * row_elems);
    at += static_cast<size_t>(n) * row_elems;
  }
  const int me = t.rank();
  Outcome out;
  // Note [reduce-scatter in place of a work buffer]
  // Through shared memory only this rank's segment is written (the others' are read once, to
  // stage them for their owners), so the input itself can stand for the others' segments and
  // the output for this rank's: no copy of the whole input, no work buffer. The ring writes
  // partial sums into every segment, and a prescale must scale all of them first: both go
  // through the work buffer.
  const bool direct = shared_memory && r.prescale == 1.0;
  const size_t work_bytes = direct ? 0 : total * es;
  const size_t mine = segs.count[me] * es;
  char* dst = static_cast<char*>(given_output(e, mine));
  // The input's shape is the same on every rank, so is the decision to agree.
  std::vector<int> failed = allocate_agreed(
      t, total * es >= kAgreedAllocationBytes, members, [&] {
        if (work.size() < work_bytes) work.resize(work_bytes);
        if (!dst) dst = static_cast<char*>((out.output = OwnedBuffer(mine)).data);
      });
  if (!failed.empty()) {
    return out_of_memory(failed, direct ? sized("its", segs.count[me] * es, "output", dt)
                                        : sized("its", total * es, "work buffer", dt),
                         e.request, members);
  }
  PhaseTrace phases(e);
  out.output_shape = with_rows(e.request.shape, rows[me]);
  out.output_dtype = dt;
  const double post = applied_postscale(r.reduce_op, r.postscale, t.size());
  char* input = static_cast<char*>(const_cast<void*>(e.input));
  if (direct) {
    std::memcpy(dst, input + segs.offset[me] * es, mine);
    phases.end("MEMCPY_IN_OUTPUT");
    const size_t after = segs.offset[me] + segs.count[me];
    const SpanBuffer buf({{input, segs.offset[me]},
                          {dst, segs.count[me]},
                          {input + after * es, total - after}}, es);
    shm_reduce_scatter_nranks(t, buf, segs, dt, r.reduce_op, post);
    phases.end("SHM_REDUCE_SCATTER");
    return wrong_output_size(e, mine, std::move(out));
  }
  copy_scaled(work.data(), e.input, total, dt, r.prescale);
  phases.end("MEMCPY_IN_WORK_BUFFER");
  if (shared_memory) {
    shm_reduce_scatter_nranks(t, SpanBuffer({{work.data(), total}}, es), segs, dt, r.reduce_op, post);
    phases.end("SHM_REDUCE_SCATTER");
  } else {
    ring_reduce_scatter(t, SpanBuffer({{work.data(), total}}, es), segs, dt, r.reduce_op, post,
                        scratch, piece_bytes);
    phases.end("RING_REDUCE_SCATTER");
  }
  std::memcpy(dst, work.data() + segs.offset[me] * es, mine);
  phases.end("MEMCPY_OUT_WORK_BUFFER");
  return wrong_output_size(e, mine, std::move(out));
}

}  // namespace hvdlite
