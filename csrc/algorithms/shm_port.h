// What the shared-memory algorithms (shm_allreduce.cc's queues, shm_allreduce_nranks.cc's
// rounds) use of a transport: its ranks, one shared area, the wait policy, the doorbell and
// the counters.
// ShmPort::of(t) is the transport's own (the area of lane 0); shm_lanes.cc makes one per
// further lane, over that lane's area, with a wait policy that never calls the transport
// from another thread (Note [lanes]).
#pragma once

#include <cstdint>
#include <functional>

#include "transport/transport.h"

namespace hvdlite {

struct ShmPort {
  int rank = 0, size = 1;
  Transport::SharedArea area;
  std::function<void(uint64_t polls)> waiting_for_peer;  // Transport::waiting_for_peer's contract
  std::function<void()> peer_waited;
  std::function<void()> ring_peers;  // after progress a peer may wait for (Transport::ring_peers)
  TransportStats* stats = nullptr;

  static ShmPort of(Transport& t) {
    ShmPort port;
    port.rank = t.rank();
    port.size = t.size();
    port.area = t.shared_area();
    port.waiting_for_peer = [&t](uint64_t polls) { t.waiting_for_peer(polls); };
    port.peer_waited = [&t] { t.peer_waited(); };
    port.ring_peers = [&t] { t.ring_peers(); };
    port.stats = &t.stats();
    return port;
  }
};

}  // namespace hvdlite
