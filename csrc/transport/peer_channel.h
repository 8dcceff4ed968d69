// User point-to-point (torch.distributed's send / recv): messages between two members of a
// group on a channel of their own, never matched with the group's collectives, negotiation or
// side messages. Nothing here is negotiated: any thread may call it at any time, next to the
// group's loop thread (the MPI backend needs MPI_THREAD_MULTIPLE for that).
//
// A receive matches the earliest message from its source (any source: from anyone) with its
// tag that no earlier-posted receive took, as MPI matches them. Its byte count must equal the
// sender's: a message of another size is taken off the channel (so later messages still match)
// and the receive fails naming both counts.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

namespace hvdlite {

class PeerTransfer {
 public:
  virtual ~PeerTransfer() = default;
  // True once the transfer has finished; throws Error (every call after the first too) when it
  // finished with one. Safe to call from several threads.
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

 protected:
  // The checks every backend makes before posting (peer_channel.cc). `what`: "send" or "recv".
  void check_peer(const char* what, int peer, int tag, int max_tag) const;
};

}  // namespace hvdlite
