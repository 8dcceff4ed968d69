#include "algorithms/hierarchical.h"

#include <algorithm>
#include <optional>
#include <thread>

#include "algorithms/exchange_allreduce.h"
#include "algorithms/ring_pass.h"
#include "algorithms/shm_allreduce_nranks.h"

namespace hvdlite {
namespace {

// True when every rank of `t` has the same number of ranks on its host.
bool same_ranks_per_host(Transport& t) {
  const uint64_t n = static_cast<uint64_t>(t.topology().local_size);
  uint64_t words[2] = {n, ~n};  // both survive the AND unchanged only if all ranks agree
  t.start_control_and(words, 2);
  while (!t.test_control()) std::this_thread::yield();
  return words[0] == n && words[1] == ~n;
}

// Runs each lane's passes in order, one step of each lane at a time: both steps are posted
// before either is waited for, so they travel together.
void run_side_by_side(std::vector<RingPass>& a, std::vector<RingPass>& b) {
  size_t i = 0, j = 0;
  for (;;) {
    while (i < a.size() && a[i].done()) ++i;
    while (j < b.size() && b[j].done()) ++j;
    const bool in_a = i < a.size(), in_b = j < b.size();
    if (!in_a && !in_b) return;
    if (in_a) a[i].post();
    if (in_b) b[j].post();
    if (in_a) a[i].finish();
    if (in_b) b[j].finish();
  }
}

}  // namespace

std::unique_ptr<Hierarchy> make_hierarchy(Transport& t, const Config& config) {
  if (config.hierarchical_allreduce == 0) return nullptr;
  const Topology& topo = t.topology();
  // local_size is the same on every rank once agreed, so all ranks take the same branch.
  if (!same_ranks_per_host(t) || topo.local_size == 1 || topo.local_size == topo.size) return nullptr;
  auto h = std::make_unique<Hierarchy>();
  h->intra = t.split(topo.host, topo.local_rank, Transport::SplitFor::Stage);
  h->cross = t.split(topo.local_rank, topo.cross_rank, Transport::SplitFor::Stage);
  h->chunk_bytes = config.hierarchical_chunk_bytes;
  h->exchange_max_bytes = config.exchange_max_bytes;
  if (shm_allreduce_nranks_available(*h->intra)) h->shm_min_bytes = config.shm_allreduce_min_bytes;
  return h;
}

void hierarchical_allreduce(Hierarchy& h, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                            double postscale, std::vector<uint8_t>& scratch, size_t piece_bytes,
                            HierarchyTimes* times) {
  if (buf.count() == 0) return;
  using Kind = RingPass::Kind;
  Transport& intra = *h.intra;
  Transport& cross = *h.cross;
  const size_t chunk = std::max<size_t>(1, h.chunk_bytes / buf.elem_size());
  const size_t chunks = (buf.count() + chunk - 1) / chunk;
  auto chunk_buf = [&](size_t c) { return buf.slice(c * chunk, std::min(chunk, buf.count() - c * chunk)); };
  if (h.shm_min_bytes != 0 && buf.count() * buf.elem_size() >= h.shm_min_bytes) {
    for (size_t c = 0; c < chunks; ++c) {
      SpanBuffer whole = chunk_buf(c);
      shm_reduce_scatter_nranks(intra, whole, dtype, op, 1.0);
      if (times && c + 1 == chunks) times->scattered = std::chrono::steady_clock::now();
      const Segments segs = even_segments(whole.count(), intra.size());
      SpanBuffer mine = whole.slice(segs.offset[intra.rank()], segs.count[intra.rank()]);
      // Note [one slow step across two hosts], below.
      if (cross.size() == 2 && mine.count() * mine.elem_size() <= h.exchange_max_bytes) {
        exchange_allreduce(cross, mine, dtype, op, postscale, h.cross_scratch);
      } else {
        ring_allreduce(cross, mine, dtype, op, postscale, h.cross_scratch, piece_bytes);
      }
      if (times && c + 1 == chunks) times->crossed = std::chrono::steady_clock::now();
      shm_allgather_nranks(intra, whole);
    }
    return;
  }
  // Software pipeline. Slot s: within the host, reduce-scatter chunk s, then all-gather chunk
  // s-2; meanwhile chunk s-1 (this rank's share of it) goes around the ring across hosts.
  // Every rank runs the same slots and steps, so the steps of both lanes can be posted before
  // either is waited for without any rank waiting on a step its peers have not posted.
  for (size_t s = 0; s < chunks + 2; ++s) {
    std::vector<RingPass> within, across;
    within.reserve(2);
    across.reserve(2);
    if (s < chunks) {
      SpanBuffer c = chunk_buf(s);
      within.emplace_back(Kind::ReduceScatter, intra, c, even_segments(c.count(), intra.size()),
                          dtype, op, 1.0, &scratch, piece_bytes);
    }
    if (s >= 2) {
      SpanBuffer c = chunk_buf(s - 2);
      within.emplace_back(Kind::Allgather, intra, c, even_segments(c.count(), intra.size()), dtype,
                          op, 1.0, nullptr, piece_bytes);
    }
    bool exchange_across = false;
    std::optional<SpanBuffer> mine;
    if (s >= 1 && s - 1 < chunks) {
      SpanBuffer c = chunk_buf(s - 1);
      const Segments segs = even_segments(c.count(), intra.size());
      mine = c.slice(segs.offset[intra.rank()], segs.count[intra.rank()]);
      // Note [one slow step across two hosts]: between two hosts a small share is swapped
      // whole in one step instead of the ring's two. With a link delay that step is what the
      // all-reduce costs. `mine` has the same size on every rank of this cross group, so its
      // members choose alike (other groups may choose otherwise: they do not talk to it).
      exchange_across = cross.size() == 2 && mine->count() * mine->elem_size() <= h.exchange_max_bytes;
      if (!exchange_across) {
        const Segments shares = even_segments(mine->count(), cross.size());
        across.emplace_back(Kind::ReduceScatter, cross, *mine, shares, dtype, op, postscale,
                            &h.cross_scratch, piece_bytes);
        across.emplace_back(Kind::Allgather, cross, *mine, shares, dtype, op, 1.0, nullptr,
                            piece_bytes);
      }
    }
    run_side_by_side(within, across);
    if (exchange_across) exchange_allreduce(cross, *mine, dtype, op, postscale, h.cross_scratch);
    // The stages overlap: each time is when a stage finished its last chunk.
    if (times && s + 1 == chunks) times->scattered = std::chrono::steady_clock::now();
    if (times && s == chunks) times->crossed = std::chrono::steady_clock::now();
  }
}

}  // namespace hvdlite
