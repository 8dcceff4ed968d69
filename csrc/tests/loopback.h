// A Transport whose ranks are threads of one process, for in-process unit tests (as gloo's
// tests do). Every rank's transport shares one Fabric: a FIFO mailbox per (communicator,
// channel, sender, receiver). Sends are eager (the bytes are copied at once); receives block
// until a message arrives, and give up with an error after a timeout, so a broken algorithm
// fails its test instead of hanging it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "transport/transport.h"

namespace hvdlite {
namespace testing {

class Fabric {
 public:
  // `ranks_per_host` consecutive ranks share a host (local_rank / cross_rank follow from it).
  // A communicator whose ranks are all on one host gets a shared area (Transport::
  // shared_area()) as the MPI backend's: of `shared_area_bytes` at two ranks, of
  // Transport::shared_area_bytes(ranks) at more; 0: none.
  explicit Fabric(int size, int ranks_per_host = 0,
                  std::chrono::milliseconds timeout = std::chrono::seconds(20),
                  size_t shared_area_bytes = kSharedAreaBytes);
  static constexpr size_t kSharedAreaBytes = size_t(2) << 20;  // the MPI backend's size
  // The world transport of one rank. Call once per rank.
  std::unique_ptr<Transport> world(int rank);

  // Mailboxes. `comm` names the communicator; from/to are ranks within it.
  using Key = std::tuple<std::string, int, int, int>;  // comm, channel, from, to
  void send(const Key& key, const void* data, size_t bytes);
  std::vector<uint8_t> recv(const Key& key);                  // blocking, with the timeout
  bool try_recv(const Key& key, std::vector<uint8_t>& out);  // non-blocking

  int size() const { return size_; }
  // Negotiation rounds of communicators on one host gathered, as the MPI backend's shared
  // board does (Transport::start_control_gather); off by default, as the controller's own
  // tests hand it entries without data.
  bool gather_rounds = false;
  // Lanes of every shared area (Transport::lanes(), Note [lanes] in shm_lanes.h).
  int lanes = 1;
  // Control rounds (AND or gather) every rank started through the transport so far.
  std::atomic<size_t> control_rounds{0};
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The shared area of communicator `comm` of `ranks` (zeroed, 64-byte aligned), made on
  // first use.
  Transport::SharedArea shared_area(const std::string& comm, int ranks);
  int host_of(int world_rank) const { return world_rank / ranks_per_host_; }
  // Bytes sent on the data channels so far, between ranks of different hosts.
  size_t cross_host_bytes() const;

 private:
  int size_, ranks_per_host_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::deque<std::vector<uint8_t>>> boxes_;
  std::map<std::string, std::vector<int>> members_;  // comm -> world ranks, for host accounting
  size_t cross_host_bytes_ = 0;
  size_t shared_area_bytes_;
  std::map<std::string, std::vector<uint64_t>> areas_;
  friend class LoopbackTransport;
};

// Runs fn(rank) on `size` threads at once and rethrows the first exception any of them threw.
void run_ranks(int size, const std::function<void(int rank)>& fn);

}  // namespace testing
}  // namespace hvdlite
