#include "engine/fusion.h"

#include <algorithm>
#include <cstring>

#include "algorithms/adasum.h"
#include "algorithms/exchange_allreduce.h"
#include "algorithms/reduce.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/shm_allreduce.h"
#include "observability/timeline.h"

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
    : transport_(transport), config_(config), complete_(std::move(complete)),
      lane_threads_(config.shm_idle_lanes ? LaneThreads::Priority::Idle : LaneThreads::Priority::Normal) {}

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
  trace_round_bytes(round_bytes_);
  round_bytes_ = 0;
}

namespace {

// Tensors at least this large are reduced in place rather than packed: copying them in and
// out of the fusion buffer costs more than the extra messages of one more span.
constexpr size_t kInPlaceBytes = 64 * 1024;

// The algorithm for a batch of `bytes` at `ranks` ranks, alike on every rank. At 2 ranks
// the exchange sends what the ring sends (the whole buffer, each way) in one step instead
// of two: below the limit latency dominates and it wins. At more ranks it would send more
// than the ring (the buffer in each of log2 n steps), so the ring stays.
bool use_exchange(size_t bytes, int ranks, size_t limit) {
  return ranks == 2 && bytes <= limit;
}

// All ranks on one host, from `min_bytes` up (alike on every rank: the shared area exists
// on every rank or none, and the setting agrees).
bool use_shared_memory(size_t bytes, Transport& t, size_t min_bytes) {
  return min_bytes != 0 && bytes >= min_bytes && shm_allreduce_available(t);
}

// Elements per piece of a batch of `count` elements: pieces only at 2 ranks, where each
// element is reduced once, as (one rank's) op (the other's), whichever algorithm runs and
// wherever the piece boundaries fall, so the results are bitwise those of one piece. At
// more ranks the ring's operand order depends on where its segments fall.
size_t piece_count(size_t count, size_t elem_size, int ranks, bool hierarchical, size_t piece_bytes) {
  const size_t piece = piece_bytes / elem_size;
  if (ranks != 2 || hierarchical || piece == 0 || count < 2 * piece) return count;
  return piece;
}

}  // namespace

// A staged device member's host bytes, which pieces of the batch wait for and hand back.
struct AllreduceExecutor::Watched {
  const char* data;
  size_t bytes;
  DeviceWork* device;
};

void AllreduceExecutor::visit(const std::vector<Watched>& watched, const char* p, size_t bytes,
                              void (DeviceWork::*step)(const void*, size_t)) {
  for (const Watched& w : watched) {
    const char* lo = std::max(p, w.data);
    const char* hi = std::min(p + bytes, w.data + w.bytes);
    if (lo < hi) (w.device->*step)(lo, static_cast<size_t>(hi - lo));
  }
}

void pack_prereduce(const std::vector<TensorEntry*>& entries, void* dst) {
  char* at = static_cast<char*>(dst);
  for (TensorEntry* e : entries) {
    if (e->device) e->device->before_read();
    const size_t count = static_cast<size_t>(num_elements(e->request.shape));
    copy_scaled(at, e->input, count, e->request.dtype, e->request.prescale);
    at += count * dtype_size(e->request.dtype);
  }
}

void AllreduceExecutor::complete_prereduced(const std::vector<TensorEntry*>& entries,
                                            const void* reduced) {
  const char* at = static_cast<const char*>(reduced);
  for (TensorEntry* e : entries) {
    const Request& r = e->request;
    const size_t count = static_cast<size_t>(num_elements(r.shape));
    // Every rank scales the same reduced bits: the results stay identical.
    copy_scaled(e->output, at, count, r.dtype,
                applied_postscale(r.reduce_op, r.postscale, transport_.size()));
    at += count * dtype_size(r.dtype);
    round_bytes_ += count * dtype_size(r.dtype);
  }
  for (TensorEntry* e : entries) complete_(e, Outcome{});
  trace_round_bytes(round_bytes_);
  round_bytes_ = 0;
}

void AllreduceExecutor::run(Batch& batch) {
  if (batch.key.reduce_op == ReduceOp::Adasum) return run_adasum(batch);
  const Response& r = batch.key;
  const size_t ws = dtype_size(batch.wire);
  const bool converted = batch.wire != r.dtype;
  // Which members are packed depends only on the response, so every rank (joined ones
  // included) lays out the same logical buffer.
  auto in_place = [&](const Member& m) { return !converted && m.count * ws >= kInPlaceBytes; };
  const bool traced = Timeline::get().active();
  BatchTimes times;
  if (traced) times.start = Clock::now();
  // Reduced in pieces (Note [pipelined staging]) or whole: decided from what every rank
  // knows alike, never from where this rank's tensors live.
  const bool hierarchical = hierarchy_ && config_.hierarchical_allreduce != 0;  // autotune may turn it off
  const size_t piece = piece_count(batch.count, ws, transport_.size(), hierarchical,
                                   config_.pipeline_piece_bytes);
  size_t packed = 0, zero_count = 0;
  std::vector<Watched> watched;  // staged device data the pieces wait for and hand back
  for (const Member& m : batch.members) {
    if (!in_place(m)) packed += m.count;
    else if (!m.entry) zero_count += m.count;
    DeviceWork* device = m.entry ? m.entry->device.get() : nullptr;
    if (!device) continue;
    // Read here whole: packed members, prescaled ones (scaled into the output first), and
    // every member of a batch reduced in one piece.
    if (piece == batch.count || !in_place(m) || r.prescale != 1.0 || !device->piecewise()) {
      device->before_read();
    } else {
      watched.push_back({static_cast<const char*>(m.entry->output), m.count * ws, device});
    }
  }
  if (fusion_buffer_.size() < packed * ws) fusion_buffer_.resize(packed * ws);
  if (zeros_.size() < zero_count * ws) zeros_.resize(zero_count * ws);
  std::memset(zeros_.data(), 0, zero_count * ws);

  std::vector<Span> spans{{fusion_buffer_.data(), packed}};
  size_t pack_at = 0, zero_at = 0;
  for (const Member& m : batch.members) {
    if (in_place(m)) {
      if (!m.entry) {
        spans.push_back({zeros_.data() + zero_at * ws, m.count});
        zero_at += m.count;
      } else {
        if (m.entry->input != m.entry->output || r.prescale != 1.0) {
          copy_scaled(m.entry->output, m.entry->input, m.count, r.dtype, r.prescale);
        }
        spans.push_back({m.entry->output, m.count});
      }
      continue;
    }
    void* dst = fusion_buffer_.data() + pack_at * ws;
    pack_at += m.count;
    if (!m.entry) std::memset(dst, 0, m.count * ws);
    else if (!converted) copy_scaled(dst, m.entry->input, m.count, r.dtype, r.prescale);
    else convert_scaled(dst, batch.wire, m.entry->input, r.dtype, m.count, r.prescale);
  }

  // Scaling after the reduction happens inside the ring (once per element, by its owner);
  // compressed data is scaled on its way back to full precision instead.
  const double post = applied_postscale(r.reduce_op, r.postscale, transport_.size());
  if (traced) times.packed = Clock::now();
  // The algorithm is chosen once, for the whole batch, and runs on each piece.
  const SpanBuffer whole(spans, ws);
  const bool shared_memory = !hierarchical && use_shared_memory(batch.count * ws, transport_, config_.shm_allreduce_min_bytes);
  const bool exchange = !hierarchical && !shared_memory &&
                        use_exchange(batch.count * ws, transport_.size(), config_.exchange_max_bytes);
  times.hierarchical = hierarchical;
  times.shared_memory = shared_memory;
  times.exchange = exchange;
  auto reduce = [&](const SpanBuffer& buf) {
    if (hierarchical) {
      hierarchical_allreduce(*hierarchy_, buf, batch.wire, r.reduce_op, converted ? 1.0 : post,
                             scratch_, config_.ring_piece_bytes, traced ? &times.stages : nullptr);
    } else if (shared_memory) {
      shm_allreduce(transport_, buf, batch.wire, r.reduce_op, converted ? 1.0 : post, &lane_threads_);
    } else if (exchange) {
      exchange_allreduce(transport_, buf, batch.wire, r.reduce_op, converted ? 1.0 : post, scratch_);
    } else {
      ring_allreduce(transport_, buf, batch.wire, r.reduce_op, converted ? 1.0 : post, scratch_,
                     config_.ring_piece_bytes, traced ? &times.scattered : nullptr);
    }
  };
  if (piece == batch.count) {
    reduce(whole);
  } else {
    for (size_t begin = 0; begin < batch.count; begin += piece) {
      const size_t n = std::min(piece, batch.count - begin);
      whole.for_each_run(begin, n, [&](char* p, size_t c) { visit(watched, p, c * ws, &DeviceWork::wait_landed); });
      reduce(whole.slice(begin, n));
      whole.for_each_run(begin, n, [&](char* p, size_t c) { visit(watched, p, c * ws, &DeviceWork::results_ready); });
    }
  }
  if (traced) times.reduced = Clock::now();

  pack_at = 0;
  for (const Member& m : batch.members) {
    if (in_place(m)) continue;
    const void* src = fusion_buffer_.data() + pack_at * ws;
    pack_at += m.count;
    if (!m.entry) continue;
    if (!converted) copy_scaled(m.entry->output, src, m.count, r.dtype, 1.0);
    else convert_scaled(m.entry->output, r.dtype, src, batch.wire, m.count, post);
  }
  round_bytes_ += batch.count * ws;
  if (traced) {
    times.unpacked = Clock::now();
    for (const Member& m : batch.members) {
      if (!m.entry) continue;
      if (in_place(m)) trace_fused_member(*m.entry, times, "ZERO_COPY_SPAN", nullptr);
      else if (converted) trace_fused_member(*m.entry, times, "COMPRESS", "DECOMPRESS");
      else trace_fused_member(*m.entry, times, "MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER");
    }
  }
  for (const Member& m : batch.members) {
    if (m.entry) complete_(m.entry, Outcome{});
  }
}

// Adasum's batches keep their members in order, back to back, in one contiguous buffer:
// the algorithm halves it wherever half the elements fall and needs each tensor's
// boundaries (Note [Adasum per tensor]). A lone member is reduced in its output; several
// are packed (Horovod's fusion buffer), as are members that travel compressed. Never in
// pieces: a piece would cut a tensor's dot product in two.
void AllreduceExecutor::run_adasum(Batch& batch) {
  const Response& r = batch.key;
  const size_t ws = dtype_size(batch.wire);
  const bool converted = batch.wire != r.dtype;
  const bool traced = Timeline::get().active();
  BatchTimes times;
  times.adasum = true;
  if (traced) times.start = Clock::now();
  std::vector<size_t> counts;
  counts.reserve(batch.members.size());
  for (const Member& m : batch.members) {
    counts.push_back(m.count);
    if (m.entry && m.entry->device) m.entry->device->before_read();
  }
  // A joined rank (no entry) contributes zeros: a zero vector keeps the coefficient 1 on
  // both sides, so the others' result is theirs alone.
  const bool alone = batch.members.size() == 1 && !converted && batch.members[0].entry;
  void* data;
  if (alone) {
    TensorEntry* e = batch.members[0].entry;
    if (e->input != e->output || r.prescale != 1.0) copy_scaled(e->output, e->input, batch.count, r.dtype, r.prescale);
    data = e->output;
  } else {
    if (fusion_buffer_.size() < batch.count * ws) fusion_buffer_.resize(batch.count * ws);
    for (const Member& m : batch.members) {
      void* dst = fusion_buffer_.data() + m.offset * ws;
      if (!m.entry) std::memset(dst, 0, m.count * ws);
      else if (!converted) copy_scaled(dst, m.entry->input, m.count, r.dtype, r.prescale);
      else convert_scaled(dst, batch.wire, m.entry->input, r.dtype, m.count, r.prescale);
    }
    data = fusion_buffer_.data();
  }
  if (traced) times.packed = Clock::now();
  // Compressed data is scaled on its way back to full precision instead.
  adasum_allreduce(transport_, data, counts, batch.wire, converted ? 1.0 : r.postscale, scratch_,
                   use_shared_memory(batch.count * ws, transport_, config_.shm_allreduce_min_bytes));
  if (traced) times.reduced = Clock::now();
  if (!alone) {
    for (const Member& m : batch.members) {
      if (!m.entry) continue;
      const void* src = fusion_buffer_.data() + m.offset * ws;
      if (!converted) copy_scaled(m.entry->output, src, m.count, r.dtype, 1.0);
      else convert_scaled(m.entry->output, r.dtype, src, batch.wire, m.count, r.postscale);
    }
  }
  round_bytes_ += batch.count * ws;
  if (traced) {
    times.unpacked = Clock::now();
    for (const Member& m : batch.members) {
      if (!m.entry) continue;
      if (alone) trace_fused_member(*m.entry, times, "ZERO_COPY_SPAN", nullptr);
      else if (converted) trace_fused_member(*m.entry, times, "COMPRESS", "DECOMPRESS");
      else trace_fused_member(*m.entry, times, "MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER");
    }
  }
  for (const Member& m : batch.members) {
    if (m.entry) complete_(m.entry, Outcome{});
  }
}

}  // namespace hvdlite
