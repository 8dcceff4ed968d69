#include "algorithms/shm_lanes.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "algorithms/lane_threads.h"
#include "algorithms/shm_allreduce.h"
#include "algorithms/shm_allreduce_nranks.h"
#include "algorithms/shm_port.h"

namespace hvdlite {
namespace {

constexpr size_t kLine = 64;
constexpr uint64_t kSpinsBeforeYield = 64;

// Lane k of L: part k of each segment (cut on cache lines of the segment, so that lanes
// rarely write one line), as a buffer of its own with one segment per rank.
struct Lane {
  SpanBuffer buf;
  Segments segs;
};

Lane lane_of(const SpanBuffer& buf, const Segments& segs, int k, int lanes) {
  const size_t es = buf.elem_size(), per_line = std::max<size_t>(1, kLine / es);
  std::vector<Span> spans;
  Segments mine;
  size_t at = 0;
  for (size_t g = 0; g < segs.count.size(); ++g) {
    const size_t lines = (segs.count[g] + per_line - 1) / per_line;
    auto cut = [&](int i) {
      return std::min(segs.count[g], lines * static_cast<size_t>(i) / static_cast<size_t>(lanes) * per_line);
    };
    const size_t lo = cut(k), hi = cut(k + 1);
    mine.offset.push_back(at);
    mine.count.push_back(hi - lo);
    at += hi - lo;
    buf.for_each_run(segs.offset[g] + lo, hi - lo, [&](char* p, size_t c) { spans.push_back({p, c}); });
  }
  return {SpanBuffer(spans, es), mine};
}

void run_lane(const ShmPort& port, const Lane& lane, DataType dtype, ReduceOp op, double postscale) {
  if (port.size == 2) {
    shm_two_ranks(port, lane.buf, lane.segs, dtype, op, postscale, Halves{true, true});
  } else {
    run_rounds(port, lane.buf, lane.segs, dtype, op, postscale, Halves{true, true});
  }
}

}  // namespace

bool shm_runs_in_lanes(Transport& t, size_t bytes) { return t.lanes() > 1 && bytes >= kLaneMinBytes; }

void shm_allreduce_in_lanes(Transport& t, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                            double postscale, LaneThreads& threads) {
  const int lanes = t.lanes();
  const Segments segs = even_segments(buf.count(), t.size());
  std::atomic<bool> give_up{false};
  // The other lanes' ports, counting into stats of their own (added to the transport's once
  // they are done), and their errors.
  std::vector<std::unique_ptr<TransportStats>> stats;
  std::vector<ShmPort> ports(lanes);
  std::vector<std::exception_ptr> errors(lanes);
  for (int k = 1; k < lanes; ++k) {
    stats.push_back(std::make_unique<TransportStats>());
    ShmPort& port = ports[k];
    port.rank = t.rank();
    port.size = t.size();
    port.area = t.lane_area(k);
    port.waiting_for_peer = [&give_up](uint64_t polls) {
      if (give_up.load(std::memory_order_relaxed)) throw Error(Status::Internal, "shared-memory lane: given up");
      if (polls > kSpinsBeforeYield) std::this_thread::yield();
    };
    port.peer_waited = [] {};
    port.ring_peers = [&t] { t.ring_peers(); };
    port.stats = stats.back().get();
  }
  threads.start(lanes - 1, [&](int k) {
    try {
      run_lane(ports[k], lane_of(buf, segs, k, lanes), dtype, op, postscale);
    } catch (...) {
      errors[k] = std::current_exception();
    }
  }, [&t] { t.ring_peers(); });  // this thread may be asleep in the wait below
  try {
    run_lane(ShmPort::of(t), lane_of(buf, segs, 0, lanes), dtype, op, postscale);
    uint64_t polls = 0;
    while (!threads.done()) t.waiting_for_peer(++polls);
    t.peer_waited();
    threads.finish();  // the last lane's ring is over
  } catch (...) {
    give_up = true;
    threads.finish();
    throw;
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  TransportStats& total = t.stats();
  for (const auto& s : stats) {
    total.bytes_sent += s->bytes_sent.load();
    total.bytes_received += s->bytes_received.load();
    total.shared_memory_copied_bytes += s->shared_memory_copied_bytes.load();
    total.shared_memory_rounds += s->shared_memory_rounds.load();
  }
  total.shared_memory_extra_lanes += static_cast<uint64_t>(lanes - 1);
}

}  // namespace hvdlite
