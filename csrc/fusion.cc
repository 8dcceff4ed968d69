#include "fusion.h"

#include <cstring>

#include "reduce.h"
#include "ring_allreduce.h"

namespace hvdlite {
namespace {

// The dtype a tensor travels as: 16-bit floats when compression applies (float32/64 only).
DataType wire_dtype(DataType dtype, Compression c) {
  if (dtype != DataType::Float32 && dtype != DataType::Float64) return dtype;
  if (c == Compression::FP16) return DataType::Float16;
  if (c == Compression::BF16) return DataType::BFloat16;
  return dtype;
}

bool same_key(const Response& a, const Response& b) {
  return a.dtype == b.dtype && a.reduce_op == b.reduce_op && a.compression == b.compression &&
         a.prescale == b.prescale && a.postscale == b.postscale;
}

}  // namespace

AllreduceExecutor::AllreduceExecutor(Transport& transport, const Config& config, Complete complete)
    : transport_(transport), config_(config), complete_(std::move(complete)) {}

void AllreduceExecutor::add(const Response& response, TensorEntry* entry) {
  const DataType wire = wire_dtype(response.dtype, response.compression);
  const size_t count = static_cast<size_t>(num_elements(response.shape));
  const size_t bytes = count * dtype_size(wire);
  if (config_.fusion_threshold == 0 || bytes >= config_.fusion_threshold) {
    Batch alone{response, wire, {{entry, 0, count}}, count};
    run(alone);
    return;
  }
  Batch* batch = nullptr;
  for (auto& b : open_) {
    if (same_key(b.key, response)) { batch = &b; break; }
  }
  if (batch && (batch->count + count) * dtype_size(wire) > config_.fusion_threshold) {
    run(*batch);
    batch->members.clear();
    batch->count = 0;
  }
  if (!batch) {
    open_.push_back(Batch{response, wire, {}, 0});
    batch = &open_.back();
  }
  batch->members.push_back({entry, batch->count, count});
  batch->count += count;
}

void AllreduceExecutor::flush() {
  for (auto& b : open_) {
    if (!b.members.empty()) run(b);
  }
  open_.clear();
}

void AllreduceExecutor::run(Batch& batch) {
  if (batch.members.size() == 1 && batch.wire == batch.key.dtype) run_in_place(batch);
  else run_fused(batch);
  for (const Member& m : batch.members) {
    if (m.entry) complete_(m.entry, Outcome{});
  }
}

namespace {
double postscale_of(const Response& r, int size) {
  return r.postscale * (r.reduce_op == ReduceOp::Average ? 1.0 / size : 1.0);
}
}  // namespace

void AllreduceExecutor::run_in_place(const Batch& batch) {
  const Response& r = batch.key;
  const Member& m = batch.members[0];
  const size_t es = dtype_size(r.dtype);
  void* buf;
  if (m.entry) {
    buf = m.entry->output;
    if (m.entry->input != buf || r.prescale != 1.0) copy_scaled(buf, m.entry->input, m.count, r.dtype, r.prescale);
  } else {
    if (fusion_buffer_.size() < m.count * es) fusion_buffer_.resize(m.count * es);
    buf = fusion_buffer_.data();
    std::memset(buf, 0, m.count * es);
  }
  ring_allreduce(transport_, buf, m.count, r.dtype, r.reduce_op, scratch_, config_.ring_piece_bytes);
  const double post = postscale_of(r, transport_.size());
  if (m.entry && post != 1.0) copy_scaled(buf, buf, m.count, r.dtype, post);
}

void AllreduceExecutor::run_fused(const Batch& batch) {
  const Response& r = batch.key;
  const size_t ws = dtype_size(batch.wire);
  if (fusion_buffer_.size() < batch.count * ws) fusion_buffer_.resize(batch.count * ws);
  uint8_t* buf = fusion_buffer_.data();
  for (const Member& m : batch.members) {
    void* dst = buf + m.offset * ws;
    if (!m.entry) std::memset(dst, 0, m.count * ws);
    else if (batch.wire == r.dtype) copy_scaled(dst, m.entry->input, m.count, r.dtype, r.prescale);
    else convert_scaled(dst, batch.wire, m.entry->input, r.dtype, m.count, r.prescale);
  }
  ring_allreduce(transport_, buf, batch.count, batch.wire, r.reduce_op, scratch_, config_.ring_piece_bytes);
  const double post = postscale_of(r, transport_.size());
  for (const Member& m : batch.members) {
    if (!m.entry) continue;
    const void* src = buf + m.offset * ws;
    if (batch.wire == r.dtype) copy_scaled(m.entry->output, src, m.count, r.dtype, post);
    else convert_scaled(m.entry->output, r.dtype, src, batch.wire, m.count, post);
  }
}

}  // namespace hvdlite
