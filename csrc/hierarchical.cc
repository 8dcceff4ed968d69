#include "hierarchical.h"

#include <thread>

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

}  // namespace

std::unique_ptr<Hierarchy> make_hierarchy(Transport& t, const Config& config) {
  if (config.hierarchical_allreduce == 0) return nullptr;
  const Topology& topo = t.topology();
  // local_size is the same on every rank once agreed, so all ranks take the same branch.
  if (!same_ranks_per_host(t) || topo.local_size == 1 || topo.local_size == topo.size) return nullptr;
  auto h = std::make_unique<Hierarchy>();
  h->intra = t.split(topo.host, topo.local_rank);
  h->cross = t.split(topo.local_rank, topo.cross_rank);
  return h;
}

void hierarchical_allreduce(Hierarchy& h, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                            double postscale, std::vector<uint8_t>& scratch, size_t piece_bytes,
                            HierarchyTimes* times) {
  if (buf.count() == 0) return;
  Transport& intra = *h.intra;
  const Segments segs = even_segments(buf.count(), intra.size());
  const int mine = intra.rank();
  ring_reduce_scatter(intra, buf, segs, dtype, op, 1.0, scratch, piece_bytes);
  if (times) times->scattered = std::chrono::steady_clock::now();
  ring_allreduce(*h.cross, buf.slice(segs.offset[mine], segs.count[mine]), dtype, op, postscale,
                 scratch, piece_bytes);
  if (times) times->crossed = std::chrono::steady_clock::now();
  ring_allgather(intra, buf, segs, piece_bytes);
}

}  // namespace hvdlite
