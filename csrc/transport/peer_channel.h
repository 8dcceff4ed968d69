// User point-to-point (torch.distributed's send / recv): messages between two members of a
// group on a channel of their own, never matched with the group's collectives, negotiation or
// side messages. Nothing here is negotiated: any thread may call it at any time, next to the
// group's loop thread (the MPI backend needs MPI_THREAD_MULTIPLE for that).
//
// A receive matches the earliest message from its source (any source: from anyone) with its
// tag that no earlier-posted receive took, as MPI matches them. Its byte count must equal the
// sender's: a message of another size is taken off the channel (so later messages still match)
// and the receive fails naming both counts.
//
// Note [point-to-point progress]
// Programs wait on their transfers in any order: both ranks post a receive and a send to each
// other and wait on the send first (pipeline parallelism does), or wait on a collective while
// a transfer is in flight. A send above the transport's eager limit finishes only once the
// peer's matching receive has been posted to the transport, so a receive must not wait for
// its own waiter to be posted (MPI's progress rule: a wait on one request progresses every
// request of the process). So every channel keeps its outstanding transfers, and a progress
// pass (progress()) takes them all a step: it posts the receives whose message has come and
// tests every posted request. progress_all() runs the pass of every channel of the process
// (the transfers of other process sets too), and runs on every test of any transfer (so on
// every wait) and at every negotiation round of every group (so while a thread waits on a
// collective). It costs one atomic load while no transfer is outstanding.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace hvdlite {

class PeerTransfer {
 public:
  virtual ~PeerTransfer() = default;
  // True once the transfer has finished; throws Error (every call after the first too) when it
  // finished with one. Runs a progress pass over every channel first (the Note). Safe to call
  // from several threads.
  virtual bool test() = 0;
  // test() until it is true or `until` passes (false then), polling without holding a core.
  bool wait_until(std::chrono::steady_clock::time_point until);
  // The group rank that sent a finished receive (this rank for a send).
  virtual int source() const = 0;
  // The caller gives up on an unfinished transfer (it is about to be destroyed): a receive no
  // message has matched yet is withdrawn. True when the backend may still use the buffer
  // afterwards (a message on its way), which the caller must then keep alive.
  virtual bool abandon() = 0;
};

class PeerChannel {
 public:
  static constexpr int kAnySource = -1;
  virtual ~PeerChannel() = default;
  virtual int rank() const = 0;  // this rank in the group
  virtual int size() const = 0;
  // Starts sending / receiving `bytes` bytes to / from group rank `peer` (recv: kAnySource
  // too). `buf` must stay alive until the transfer has finished. Throws InvalidArgument for
  // a peer out of range or this rank itself, a negative or too large tag, or a message over
  // the backend's size limit.
  virtual std::unique_ptr<PeerTransfer> send(const void* buf, size_t bytes, int peer, int tag) = 0;
  virtual std::unique_ptr<PeerTransfer> recv(void* buf, size_t bytes, int peer, int tag) = 0;

  // One progress pass over this channel's outstanding transfers (Note [point-to-point
  // progress]). Never throws: a transfer's error is kept for its own test().
  virtual void progress() = 0;
  // progress() on every live channel of this process, when any transfer is outstanding.
  static void progress_all();
  // A new channel joins the process's list that progress_all() walks (the backend's factory
  // calls it once the channel is owned by a shared_ptr).
  static void enlist(const std::shared_ptr<PeerChannel>& channel);

 protected:
  // The checks every backend makes before posting (peer_channel.cc). `what`: "send" or "recv".
  void check_peer(const char* what, int peer, int tag, int max_tag) const;
  // Transfers outstanding on every channel of the process: each backend adds one when a
  // transfer starts and takes it back when it has finished or was abandoned.
  static std::atomic<int64_t> outstanding;
};

}  // namespace hvdlite
