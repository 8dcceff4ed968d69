// What the algorithms need from a communication backend, and nothing more:
// point-to-point pieces for the ring, a few byte collectives, and the control plane used by
// negotiation. Buffers are void* + byte counts; element types never reach a transport.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hvdlite.h"
#include "transport/peer_channel.h"

namespace hvdlite {

struct Topology {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // ranks on this host
  int cross_rank = 0, cross_size = 1;  // this rank's index among ranks with the same local_rank
  int host = 0;  // a label of this rank's host, the same for the ranks on one host, unique per host
};

// Payload bytes this rank sent to / received from peers, counted by the backend where it
// hands them to the network (for a collective: what this rank contributes to and takes from
// the others, however the library routes it). Negotiation traffic is counted apart.
// Written by the background thread, read from any thread.
struct TransportStats {
  std::atomic<uint64_t> bytes_sent{0}, bytes_received{0};
  std::atomic<uint64_t> control_bytes_sent{0};
  std::atomic<uint64_t> shared_memory_swaps{0};  // negotiation rounds through shm_swap.h / shm_board.h
  // All-reduces through the shared area (shm_allreduce.h), the bytes this rank copied to and
  // from the area for them (the algorithm's count: twice the buffer less its own segment),
  // and their rounds of pieces (each a few flag stores and waits).
  std::atomic<uint64_t> shared_memory_allreduces{0};
  std::atomic<uint64_t> shared_memory_copied_bytes{0};
  std::atomic<uint64_t> shared_memory_rounds{0};
  // Of those all-reduces, the lanes they ran beyond the first (Note [lanes] in shm_lanes.h).
  std::atomic<uint64_t> shared_memory_extra_lanes{0};
  // All-reduces that rode in a negotiation round through the shared board (controller.h):
  // reduced there, with no data round of their own.
  std::atomic<uint64_t> board_allreduces{0};
  // All-gathers, broadcasts and reduce-scatters through the shared area
  // (shm_collectives_nranks.h); their copies and rounds count as the all-reduces' do.
  std::atomic<uint64_t> shared_memory_collectives{0};
  // Waits through shared memory that went to sleep until a peer rang (Note [doorbell]).
  std::atomic<uint64_t> shared_memory_sleeps{0};
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const Topology& topology() const = 0;
  int rank() const { return topology().rank; }
  int size() const { return topology().size; }

  // Data plane, point to point. post_* return an id for wait(); wait_all() finishes every
  // posted operation. Pieces must be smaller than 2 GiB.
  virtual int post_send(const void* buf, size_t bytes, int peer) = 0;
  virtual int post_recv(void* buf, size_t bytes, int peer) = 0;
  virtual void wait(int id) = 0;
  virtual void wait_all() = 0;

  // Data plane, collectives on bytes. Any size: a backend splits what its calls cannot take.
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  virtual void allgatherv(const void* send, size_t send_bytes, void* recv,
                          const std::vector<size_t>& bytes_per_rank) = 0;
  virtual void alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                         const std::vector<size_t>& recv_bytes) = 0;
  virtual std::vector<int64_t> alltoall_counts(const std::vector<int64_t>& send) = 0;
  virtual void barrier() = 0;

  // Control plane (negotiation), on a channel separate from the data plane.
  // Bitwise AND of `words` across ranks, started without blocking; poll with test_control().
  virtual void start_control_and(uint64_t* words, size_t count) = 0;
  virtual bool test_control() = 0;
  // At 2 members: the round's words swapped with the peer instead of reduced (the caller
  // merges both sides alike), polled with test_control() too; `send` and `recv` (count words
  // each) stay alive until then. False when the backend cannot (nothing is started).
  virtual bool start_control_swap(const uint64_t* send, uint64_t* recv, size_t count) {
    (void)send, (void)recv, (void)count;
    return false;
  }
  // More than 2 members on one host: the round's packet published to every member instead of
  // reduced (the caller merges all of them alike), polled with test_control() too; after it
  // returned true, control_packet(r) reads member r's (this rank's included) until the next
  // control call. `send` may die at once. False when the backend cannot (nothing is started).
  virtual bool start_control_gather(const uint64_t* send, size_t count) {
    (void)send, (void)count;
    return false;
  }
  virtual const uint64_t* control_packet(int rank) {
    (void)rank;
    return nullptr;
  }
  // All ranks of this transport on one host: memory all of them map, for the data path of
  // shm_allreduce.h (a hierarchy's transport within a host: for its stages there, the only
  // user then), of shared_area_bytes(size()); empty elsewhere, and on every rank alike.
  // Zeroed before any rank first used it; its size never changes. The negotiation's own swap
  // (shm_swap.h) uses other memory.
  struct SharedArea {
    void* data = nullptr;
    size_t bytes = 0;
  };
  // 2 MiB at 2 ranks (shm_allreduce.cc's queues); at more, room for two rounds of 64 KiB
  // pieces per rank and segment (shm_allreduce_nranks.cc), at most 16 MiB (smaller pieces).
  static size_t shared_area_bytes(int ranks) {
    if (ranks <= 2) return size_t(2) << 20;
    const size_t n = static_cast<size_t>(ranks);
    return std::min(size_t(16) << 20, n * (n + 1) * 2 * (size_t(64) << 10) + 3 * n * 64);
  }
  virtual SharedArea shared_area() { return {}; }
  // Large all-reduces run in lanes (Note [lanes] in shm_lanes.h), each through an area of
  // its own, of the same size: lanes() of them, the same on every rank; lane 0's is
  // shared_area().
  virtual int lanes() { return 1; }
  // Lanes when none are asked for: half the host's cores per rank (the other half stays with
  // the framework's threads; Note [idle lanes] in lane_threads.h has the figures), at most 4,
  // and the lanes' areas together at most 32 MiB (containers often give /dev/shm only
  // 64 MiB). Idle lanes take only cores nobody wants: all the cores per rank.
  static int auto_lanes(int cores, int local_ranks, size_t area_bytes, bool idle_lanes = false) {
    const int per_rank = std::min(4, cores / ((idle_lanes ? 1 : 2) * std::max(1, local_ranks)));
    const int fit = static_cast<int>((size_t(32) << 20) / std::max<size_t>(1, area_bytes));
    return std::max(1, std::min(per_rank, fit));
  }
  virtual SharedArea lane_area(int lane) { return lane == 0 ? shared_area() : SharedArea{}; }
  // The wait policy of a rank waiting on its peer through shared memory, written once for
  // the negotiation's swap and the data path: called for each poll that found nothing new
  // (`polls`: such polls so far in this wait, from 1). Spins a little, yields the core, then
  // sleeps until a peer rings (Note [doorbell] in shm_doorbell.h); while a wait lasts long,
  // makes sure the peer is alive (throws Error(RanksLost) when it is lost, as a message from it
  // would fail). peer_waited() ends the wait.
  virtual void waiting_for_peer(uint64_t polls) { (void)polls; }
  virtual void peer_waited() {}
  // After a store to the shared area that a peer may be waiting for: wakes the peers asleep
  // in waiting_for_peer(). Unlike the rest of a transport, safe from any thread (lanes ring).
  virtual void ring_peers() {}
  // Whether test_control() itself sleeps while the round in flight waits (a round through
  // shared memory, Note [doorbell]): its caller then needs no sleep of its own between polls.
  virtual bool control_waits_sleep() const { return false; }
  // Rank 0 receives every rank's bytes (others get an empty vector).
  virtual std::vector<std::vector<uint8_t>> gather_control(const std::vector<uint8_t>& mine) = 0;
  // Rank 0's bytes reach every rank.
  virtual void broadcast_control(std::vector<uint8_t>& bytes) = 0;

  // A transport over the ranks of this one that pass the same color, ordered by key (ties
  // by rank), with its own data and control channels. Collective over every rank of this
  // transport; a rank passing a negative color joins none and gets null. Process sets and the
  // stages of hierarchical all-reduce are built this way; only a process set's transport gets
  // a user point-to-point channel (an MPI communicator each) and more than one lane (each an
  // area of shared memory), which a stage would never use.
  enum class SplitFor { ProcessSet, Stage };
  virtual std::unique_ptr<Transport> split(int color, int key, SplitFor use) = 0;
  // Side channel (the stall inspector): small messages any rank may send at any time, never
  // matched with negotiation or data. send_side does not block; poll_side returns false when
  // nothing has arrived.
  virtual void send_side(const std::vector<uint8_t>& bytes, int peer) = 0;
  virtual bool poll_side(std::vector<uint8_t>& bytes, int& from) = 0;

  // User point-to-point between this transport's ranks (peer_channel.h), on a channel made
  // with the transport (collectively, so a rebuilt or split transport has its own). Null when
  // the backend has none. Any thread may use it at any time.
  virtual std::shared_ptr<PeerChannel> peer_channel() { return nullptr; }

  // Ends the whole job at once (used when a rank dies with an unhandled error).
  virtual void abort(int code) = 0;

  // Elastic recovery. After a call failed with Status::RanksLost (on any rank), every
  // survivor calls shrink(): a transport over the survivors, in the same order, with fresh
  // channels. `lost` receives the ranks (of this transport) that are gone. Collective over
  // the survivors; no other call of this transport may be running. Backends that cannot
  // survive a lost rank throw InvalidArgument.
  virtual std::unique_ptr<Transport> shrink(std::vector<int>* lost);

  // A process an elastic job adds (see regroup): its environment lines (NAME=value) and the
  // host to start it on ("" lets the MPI runtime choose).
  struct NewProcess {
    std::vector<std::string> env;
    std::string host;
  };
  // Elastic resizing when hosts are added or removed. Collective over every rank of this
  // transport, none of whose other calls may be running: the ranks in `leaving` get null
  // (they leave the job); the others get a transport over themselves, in their old order,
  // followed by one new process per entry of `add`, each running `command` (the new
  // processes' own world transport joins it: see make_mpi_transport).
  virtual std::unique_ptr<Transport> regroup(const std::vector<int>& leaving,
                                             const std::vector<std::string>& command,
                                             const std::vector<NewProcess>& add);

  // The process's counts: a transport made by split() counts into its parent's, so process
  // sets and the stages of hierarchical all-reduce are included.
  TransportStats& stats() { return *stats_; }

 protected:
  void count_into(Transport& parent) { stats_ = &parent.stats(); }

 private:
  TransportStats own_stats_;
  TransportStats* stats_ = &own_stats_;
};

inline std::unique_ptr<Transport> Transport::shrink(std::vector<int>*) {
  throw Error(Status::InvalidArgument, "this transport cannot recover from a lost rank");
}

inline std::unique_ptr<Transport> Transport::regroup(const std::vector<int>&,
                                                     const std::vector<std::string>&,
                                                     const std::vector<NewProcess>&) {
  throw Error(Status::InvalidArgument, "this transport cannot add or remove ranks");
}

// Backends. Each lives in its own file (transport/mpi.cc, over the MPI that mpi/library.h
// loaded, which must be loaded first). max_transfer_bytes: the largest
// byte count one MPI collective call is given (Config::max_transfer_bytes). A process that an
// elastic job started (MPI_Comm_spawn, see Transport::regroup) joins its job's world here.
// `shm`: how every transport made from this one uses a host's shared memory.
struct SharedMemoryOptions {
  int lanes = 0;                // Config::shm_lanes (0: auto)
  uint64_t sleep_after_us = 50;  // Config::shm_sleep_after_us (0: never sleep), Note [doorbell]
  bool idle_lanes = false;       // Config::shm_idle_lanes (Note [idle lanes])
};
std::unique_ptr<Transport> make_mpi_transport(size_t max_transfer_bytes, const SharedMemoryOptions& shm);
const char* mpi_library_version();
// True when the MPI backend can survive a lost rank (the loaded MPI has ULFM).
bool mpi_fault_tolerant();
// Finalizes MPI at process exit if hvdlite was the one that initialised it.
void finalize_mpi_if_owned();

}  // namespace hvdlite
