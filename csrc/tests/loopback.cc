#include "loopback.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include "hvdlite.h"

namespace hvdlite {
namespace testing {
namespace {

// Channels keep the planes apart, as the MPI backend's separate communicators do.
enum Channel : int { kPointToPoint, kCollective, kControlAnd, kControl, kSplit, kSide, kControlGather };

}  // namespace

class LoopbackTransport : public Transport {
 public:
  LoopbackTransport(Fabric& fabric, std::string comm, std::vector<int> members, int index)
      : fabric_(fabric), comm_(std::move(comm)), members_(std::move(members)) {
    topo_.rank = index;
    topo_.size = static_cast<int>(members_.size());
    // local: members on this member's host; cross: members with the same local_rank.
    std::vector<int> local_rank(members_.size());
    std::map<int, int> per_host;
    for (size_t i = 0; i < members_.size(); ++i) local_rank[i] = per_host[fabric_.host_of(members_[i])]++;
    const int host = fabric_.host_of(members_[index]);
    topo_.host = host;
    topo_.local_rank = local_rank[index];
    topo_.local_size = per_host[host];
    topo_.cross_rank = topo_.cross_size = 0;
    for (size_t i = 0; i < members_.size(); ++i) {
      if (local_rank[i] != topo_.local_rank) continue;
      if (static_cast<int>(i) < index) ++topo_.cross_rank;
      ++topo_.cross_size;
    }
    std::lock_guard<std::mutex> lk(fabric_.mu_);
    fabric_.members_[comm_] = members_;
  }

  const Topology& topology() const override { return topo_; }

  int post_send(const void* buf, size_t bytes, int peer) override {
    fabric_.send(key(kPointToPoint, rank(), peer), buf, bytes);
    ops_.push_back({false, nullptr, bytes, peer, true});
    return static_cast<int>(ops_.size() - 1);
  }

  int post_recv(void* buf, size_t bytes, int peer) override {
    ops_.push_back({true, buf, bytes, peer, false});
    return static_cast<int>(ops_.size() - 1);
  }

  void wait(int id) override {
    // Messages from one peer arrive in order, so earlier receives from it complete first.
    for (int i = 0; i <= id; ++i) {
      if (ops_[i].is_recv && !ops_[i].done && ops_[i].peer == ops_[id].peer) finish(ops_[i]);
    }
  }

  void wait_all() override {
    for (Op& op : ops_) {
      if (!op.done) finish(op);
    }
    ops_.clear();
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    if (rank() == root) {
      for (int r = 0; r < size(); ++r) {
        if (r != root) fabric_.send(key(kCollective, root, r), buf, bytes);
      }
    } else {
      receive_exactly(key(kCollective, root, rank()), buf, bytes);
    }
  }

  void allgatherv(const void* send, size_t send_bytes, void* recv,
                  const std::vector<size_t>& bytes_per_rank) override {
    for (int r = 0; r < size(); ++r) {
      if (r != rank()) fabric_.send(key(kCollective, rank(), r), send, send_bytes);
    }
    size_t offset = 0;
    for (int r = 0; r < size(); ++r) {
      char* dst = static_cast<char*>(recv) + offset;
      if (r == rank()) std::memcpy(dst, send, send_bytes);
      else receive_exactly(key(kCollective, r, rank()), dst, bytes_per_rank[r]);
      offset += bytes_per_rank[r];
    }
  }

  void alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes) override {
    size_t offset = 0;
    for (int r = 0; r < size(); ++r) {
      const char* src = static_cast<const char*>(send) + offset;
      if (r != rank()) fabric_.send(key(kCollective, rank(), r), src, send_bytes[r]);
      else own_ = std::vector<uint8_t>(src, src + send_bytes[r]);
      offset += send_bytes[r];
    }
    offset = 0;
    for (int r = 0; r < size(); ++r) {
      char* dst = static_cast<char*>(recv) + offset;
      if (r == rank()) std::memcpy(dst, own_.data(), own_.size());
      else receive_exactly(key(kCollective, r, rank()), dst, recv_bytes[r]);
      offset += recv_bytes[r];
    }
  }

  std::vector<int64_t> alltoall_counts(const std::vector<int64_t>& send) override {
    std::vector<int64_t> recv(send.size());
    std::vector<size_t> bytes(send.size(), sizeof(int64_t));
    alltoallv(send.data(), bytes, recv.data(), bytes);
    return recv;
  }

  void barrier() override {
    uint64_t word = 0;
    start_control_and(&word, 1);
    while (!test_control()) std::this_thread::yield();
  }

  void start_control_and(uint64_t* words, size_t count) override {
    fabric_.control_rounds += 1;
    for (int r = 0; r < size(); ++r) {
      if (r != rank()) fabric_.send(key(kControlAnd, rank(), r), words, count * sizeof(uint64_t));
    }
    and_words_ = words;
    and_count_ = count;
    and_waiting_.clear();
    for (int r = 0; r < size(); ++r) {
      if (r != rank()) and_waiting_.push_back(r);
    }
  }

  // As the MPI backend's board (more than 2 ranks; the shared area stands for "one host").
  bool start_control_gather(const uint64_t* send, size_t count) override {
    if (!fabric_.gather_rounds || size() <= 2 || !shared_area().data) return false;
    fabric_.control_rounds += 1;
    for (int r = 0; r < size(); ++r) {
      if (r != rank()) fabric_.send(key(kControlGather, rank(), r), send, count * sizeof(uint64_t));
    }
    packets_.assign(static_cast<size_t>(size()), {});
    packets_[static_cast<size_t>(rank())].assign(send, send + count);
    gather_count_ = count;
    gather_waiting_.clear();
    for (int r = 0; r < size(); ++r) {
      if (r != rank()) gather_waiting_.push_back(r);
    }
    return true;
  }

  const uint64_t* control_packet(int rank) override { return packets_[static_cast<size_t>(rank)].data(); }

  bool test_control() override {
    std::vector<uint8_t> msg;
    for (auto it = gather_waiting_.begin(); it != gather_waiting_.end();) {
      if (!fabric_.try_recv(key(kControlGather, *it, rank()), msg)) {
        ++it;
        continue;
      }
      if (msg.size() != gather_count_ * sizeof(uint64_t)) {
        throw Error(Status::Internal, "loopback: gathered packets of different lengths");
      }
      const auto* theirs = reinterpret_cast<const uint64_t*>(msg.data());
      packets_[static_cast<size_t>(*it)].assign(theirs, theirs + gather_count_);
      it = gather_waiting_.erase(it);
    }
    if (!gather_waiting_.empty()) return false;
    for (auto it = and_waiting_.begin(); it != and_waiting_.end();) {
      if (!fabric_.try_recv(key(kControlAnd, *it, rank()), msg)) {
        ++it;
        continue;
      }
      if (msg.size() != and_count_ * sizeof(uint64_t)) {
        throw Error(Status::Internal, "loopback: control words of different lengths");
      }
      const auto* theirs = reinterpret_cast<const uint64_t*>(msg.data());
      for (size_t i = 0; i < and_count_; ++i) and_words_[i] &= theirs[i];
      it = and_waiting_.erase(it);
    }
    return and_waiting_.empty();
  }

  std::vector<std::vector<uint8_t>> gather_control(const std::vector<uint8_t>& mine) override {
    if (rank() != 0) {
      fabric_.send(key(kControl, rank(), 0), mine.data(), mine.size());
      return {};
    }
    std::vector<std::vector<uint8_t>> all(size());
    all[0] = mine;
    for (int r = 1; r < size(); ++r) all[r] = fabric_.recv(key(kControl, r, 0));
    return all;
  }

  void broadcast_control(std::vector<uint8_t>& bytes) override {
    if (rank() == 0) {
      for (int r = 1; r < size(); ++r) fabric_.send(key(kControl, 0, r), bytes.data(), bytes.size());
    } else {
      bytes = fabric_.recv(key(kControl, 0, rank()));
    }
  }

  void send_side(const std::vector<uint8_t>& bytes, int peer) override {
    fabric_.send(key(kSide, rank(), peer), bytes.data(), bytes.size());
  }

  bool poll_side(std::vector<uint8_t>& bytes, int& from) override {
    for (int r = 0; r < size(); ++r) {
      if (fabric_.try_recv(key(kSide, r, rank()), bytes)) {
        from = r;
        return true;
      }
    }
    return false;
  }

  std::unique_ptr<Transport> split(int color, int key_, SplitFor) override {
    const int32_t mine[2] = {color, key_};
    for (int r = 0; r < size(); ++r) {
      if (r != rank()) fabric_.send(key(kSplit, rank(), r), mine, sizeof(mine));
    }
    std::vector<std::tuple<int, int, int>> same;  // key, index, world rank
    for (int r = 0; r < size(); ++r) {
      int32_t theirs[2] = {mine[0], mine[1]};
      if (r != rank()) receive_exactly(key(kSplit, r, rank()), theirs, sizeof(theirs));
      if (color >= 0 && theirs[0] == color) same.emplace_back(theirs[1], r, members_[r]);
    }
    const std::string child = comm_ + "/" + std::to_string(splits_++) + "." + std::to_string(color);
    if (color < 0) return nullptr;
    std::sort(same.begin(), same.end());
    std::vector<int> members;
    int index = 0;
    for (const auto& m : same) {
      if (std::get<1>(m) == rank()) index = static_cast<int>(members.size());
      members.push_back(std::get<2>(m));
    }
    return std::make_unique<LoopbackTransport>(fabric_, child, members, index);
  }

  SharedArea shared_area() override { return lane_area(0); }
  int lanes() override { return shared_area().data ? fabric_.lanes : 1; }
  SharedArea lane_area(int lane) override {
    if (!shared_area_exists() || lane < 0 || lane >= fabric_.lanes) return {};
    return fabric_.shared_area(lane == 0 ? comm_ : comm_ + "#lane" + std::to_string(lane), size());
  }

  bool shared_area_exists() const { return size() >= 2 && topo_.local_size == size(); }

  // Threads cannot die alone: a peer that never comes is a test's broken algorithm, reported
  // after the fabric's timeout instead of hanging.
  void waiting_for_peer(uint64_t polls) override {
    const auto now = std::chrono::steady_clock::now();
    if (polls == 1) waiting_since_ = now;
    if (now - waiting_since_ > fabric_.timeout()) {
      throw Error(Status::Internal, "loopback: rank " + std::to_string(rank()) + " of '" + comm_ +
                  "' waited " + std::to_string(fabric_.timeout().count()) +
                  " ms for its peer through shared memory");
    }
    std::this_thread::yield();
  }

  void abort(int code) override {
    throw Error(Status::Internal, "loopback: abort(" + std::to_string(code) + ")");
  }

 private:
  struct Op {
    bool is_recv;
    void* buf;
    size_t bytes;
    int peer;
    bool done;
  };

  Fabric::Key key(int channel, int from, int to) const { return {comm_, channel, from, to}; }

  void receive_exactly(const Fabric::Key& k, void* buf, size_t bytes) {
    std::vector<uint8_t> msg = fabric_.recv(k);
    if (msg.size() != bytes) {
      throw Error(Status::Internal, "loopback: expected " + std::to_string(bytes) + " bytes from rank " +
                  std::to_string(std::get<2>(k)) + ", got " + std::to_string(msg.size()));
    }
    if (bytes) std::memcpy(buf, msg.data(), bytes);
  }

  void finish(Op& op) {
    if (op.is_recv) receive_exactly(key(kPointToPoint, op.peer, rank()), op.buf, op.bytes);
    op.done = true;
  }

  Fabric& fabric_;
  std::string comm_;
  std::vector<int> members_;  // world rank of each member
  Topology topo_;
  std::vector<Op> ops_;
  std::vector<uint8_t> own_;
  uint64_t* and_words_ = nullptr;
  size_t and_count_ = 0;
  std::vector<int> and_waiting_;
  std::vector<std::vector<uint64_t>> packets_;  // the gathered round's, by rank
  size_t gather_count_ = 0;
  std::vector<int> gather_waiting_;
  int splits_ = 0;
  std::chrono::steady_clock::time_point waiting_since_;
};

Fabric::Fabric(int size, int ranks_per_host, std::chrono::milliseconds timeout,
               size_t shared_area_bytes)
    : size_(size), ranks_per_host_(ranks_per_host > 0 ? ranks_per_host : size), timeout_(timeout),
      shared_area_bytes_(shared_area_bytes) {}

Transport::SharedArea Fabric::shared_area(const std::string& comm, int ranks) {
  if (shared_area_bytes_ == 0) return {};
  const size_t bytes = ranks == 2 ? shared_area_bytes_ : Transport::shared_area_bytes(ranks);
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<uint64_t>& area = areas_[comm];
  // One cache line more than asked, so the area can start on a line as a mapping does.
  if (area.empty()) area.assign(bytes / sizeof(uint64_t) + 8, 0);
  const auto at = (reinterpret_cast<uintptr_t>(area.data()) + 63) / 64 * 64;
  return {reinterpret_cast<void*>(at), bytes};
}

std::unique_ptr<Transport> Fabric::world(int rank) {
  std::vector<int> everyone(size_);
  for (int r = 0; r < size_; ++r) everyone[r] = r;
  return std::make_unique<LoopbackTransport>(*this, "world", everyone, rank);
}

void Fabric::send(const Key& key, const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  {
    std::lock_guard<std::mutex> lk(mu_);
    const int channel = std::get<1>(key);
    if (channel == kPointToPoint || channel == kCollective) {
      const std::vector<int>& m = members_[std::get<0>(key)];
      if (host_of(m[std::get<2>(key)]) != host_of(m[std::get<3>(key)])) cross_host_bytes_ += bytes;
    }
    boxes_[key].emplace_back(p, p + bytes);
  }
  cv_.notify_all();
}

std::vector<uint8_t> Fabric::recv(const Key& key) {
  std::unique_lock<std::mutex> lk(mu_);
  auto& box = boxes_[key];
  if (!cv_.wait_for(lk, timeout_, [&] { return !box.empty(); })) {
    throw Error(Status::Internal, "loopback: rank " + std::to_string(std::get<3>(key)) + " of '" +
                std::get<0>(key) + "' waited " + std::to_string(timeout_.count()) +
                " ms for a message from rank " + std::to_string(std::get<2>(key)) +
                " on channel " + std::to_string(std::get<1>(key)));
  }
  std::vector<uint8_t> msg = std::move(box.front());
  box.pop_front();
  return msg;
}

bool Fabric::try_recv(const Key& key, std::vector<uint8_t>& out) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = boxes_.find(key);
  if (it == boxes_.end() || it->second.empty()) return false;
  out = std::move(it->second.front());
  it->second.pop_front();
  return true;
}

size_t Fabric::cross_host_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cross_host_bytes_;
}

void run_ranks(int size, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(size);
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace testing
}  // namespace hvdlite
