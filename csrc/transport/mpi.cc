// The MPI backend: two private communicators, one for negotiation (control) and one for
// tensor data, so neither can mix with the other or with the user's own MPI. The world's are
// duplicates of MPI_COMM_WORLD; split() derives a process set's pair from them.
#include "mpi/calls.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <string>

#include "hvdlite.h"
#include "mpi/library.h"
#include "transport/fault_tolerance.h"
#include "transport/mpi_peer_channel.h"
#include "transport/shm_board.h"
#include "transport/shm_doorbell.h"
#include "transport/shm_swap.h"
#include "transport/transport.h"

namespace hvdlite {
namespace {

bool g_we_initialized_mpi = false;
// Set by hvdlite.elastic for the processes it adds (see src/hvdlite/elastic/settings.py).
constexpr const char* kAddedRankEnv = "HVDLITE_ELASTIC_WORKER_ID";

std::string error_string(int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return std::string(msg, len);
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  throw Error(Status::Internal, std::string(what) + " failed: " + error_string(rc));
}

// Note [errors in statuses]
// MPI_Waitall and MPI_Testall report a failed request as MPI_ERR_IN_STATUS, with the cause in
// that request's status (the others: MPI_SUCCESS, or MPI_ERR_PENDING when not completed). A
// lost peer shows only there, so the statuses are kept and the cause is what gets classified.
// `rc`: the call's code; returns the code to report (a process failure before other errors).
int error_in_statuses(int rc, const std::vector<MPI_Status>& statuses) {
  if (rc != MPI_ERR_IN_STATUS) return rc;
  int first = rc;
  for (const MPI_Status& s : statuses) {
    const int e = s.MPI_ERROR;
    if (e == MPI_SUCCESS || e == MPI_ERR_PENDING) continue;
    if (fault_tolerance::is_process_failure(e)) return e;
    if (first == MPI_ERR_IN_STATUS) first = e;
  }
  return first;
}

int as_count(size_t bytes, const char* what) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    throw Error(Status::Internal, std::string(what) + ": a single transfer of " +
                std::to_string(bytes) + " bytes exceeds MPI's 2 GiB count limit");
  }
  return static_cast<int>(bytes);
}

// Byte offsets of consecutive blocks (size_t: no overflow at any size that fits in memory).
std::vector<size_t> offsets_of(const std::vector<size_t>& bytes) {
  std::vector<size_t> at(bytes.size(), 0);
  for (size_t i = 1; i < bytes.size(); ++i) at[i] = at[i - 1] + bytes[i - 1];
  return at;
}

// True when every count and displacement fits one MPI call under `limit`.
bool fits_one_call(const std::vector<size_t>& bytes, size_t limit) {
  size_t offset = 0;
  for (size_t b : bytes) {
    if (b > limit || offset > limit) return false;
    offset += b;
  }
  return true;
}

std::vector<int> to_ints(const std::vector<size_t>& v) { return std::vector<int>(v.begin(), v.end()); }

// Lanes of the shared area (Note [lanes] in shm_lanes.h): `wanted`, or (0)
// Transport::auto_lanes for the cores this process may run on.
int lanes_for(int wanted, int local_ranks, size_t area_bytes, bool idle_lanes) {
  if (wanted > 0) return wanted;
  cpu_set_t cpus;
  const int cores = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus)
                                                                    : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return Transport::auto_lanes(cores, local_ranks, area_bytes, idle_lanes);
}

class MpiTransport : public Transport {
 public:
  // Takes ownership of two communicators over the same ranks. max_transfer_bytes: the largest
  // byte count one MPI collective call is given. with_peer_channel: make the user
  // point-to-point channel (every transport but a hierarchical stage's).
  MpiTransport(MPI_Comm control, MPI_Comm data, size_t max_transfer_bytes,
               const SharedMemoryOptions& shm, bool with_peer_channel = true)
      : limit_(std::min(max_transfer_bytes, static_cast<size_t>(INT_MAX))),
        shm_options_(shm), control_(control), data_(data) {
    MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(data_, &topo_.rank);
    MPI_Comm_size(data_, &topo_.size);
    MPI_Comm local, cross;
    check(MPI_Comm_split_type(data_, MPI_COMM_TYPE_SHARED, topo_.rank, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    MPI_Comm_rank(local, &topo_.local_rank);
    MPI_Comm_size(local, &topo_.local_size);
    check(MPI_Comm_split(data_, topo_.local_rank, topo_.rank, &cross), "MPI_Comm_split");
    MPI_Comm_rank(cross, &topo_.cross_rank);
    MPI_Comm_size(cross, &topo_.cross_size);
    // The host's label: the cross rank of its local rank 0 (distinct among local ranks 0).
    topo_.host = topo_.cross_rank;
    check(MPI_Bcast(&topo_.host, 1, MPI_INT, 0, local), "MPI_Bcast");
    MPI_Comm_free(&local);
    MPI_Comm_free(&cross);
    if (topo_.size >= 2 && topo_.local_size == topo_.size) share_memory();
    // Every path that makes a transport (world, split, shrink, regroup) runs here on all of its
    // members, so the collective dup of the point-to-point channel is safe here and nowhere later.
    if (with_peer_channel) peer_ = make_mpi_peer_channel(data_);
  }

  // Two private duplicates of MPI_COMM_WORLD (initialising MPI first if nobody has).
  static std::unique_ptr<Transport> world(size_t max_transfer_bytes, const SharedMemoryOptions& shm) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      hvdlite::check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
      g_we_initialized_mpi = true;
    }
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      throw Error(Status::Internal,
                  "MPI was initialised without thread support (MPI_THREAD_SERIALIZED or better is "
                  "needed: hvdlite calls MPI from its background thread)");
    }
    // Started by an elastic job's regroup() (which names the new rank in kAddedRankEnv): the
    // world is that job's ranks followed by the processes started with this one (the parents
    // do the same merge, with high = 0). A process the user spawned keeps its own world.
    MPI_Comm parent = MPI_COMM_NULL;
    MPI_Comm_get_parent(&parent);
    MPI_Comm base = MPI_COMM_WORLD;
    if (parent != MPI_COMM_NULL && std::getenv(kAddedRankEnv) != nullptr) {
      MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN);
      hvdlite::check(MPI_Intercomm_merge(parent, 1, &base), "MPI_Intercomm_merge");
    }
    MPI_Comm control, data;
    hvdlite::check(MPI_Comm_dup(base, &control), "MPI_Comm_dup");
    hvdlite::check(MPI_Comm_dup(base, &data), "MPI_Comm_dup");
    if (base != MPI_COMM_WORLD) MPI_Comm_free(&base);
    return std::make_unique<MpiTransport>(control, data, max_transfer_bytes, shm);
  }

  ~MpiTransport() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      stop_liveness_check();
      MPI_Comm_free(&control_);
      MPI_Comm_free(&data_);
    }
  }

  const Topology& topology() const override { return topo_; }

  std::unique_ptr<Transport> shrink(std::vector<int>* lost) override {
    MPI_Comm data = fault_tolerance::shrink(data_);
    MPI_Comm control;
    check(MPI_Comm_dup(data, &control), "MPI_Comm_dup");
    if (lost) *lost = missing_from(data);
    return std::make_unique<MpiTransport>(control, data, limit_, shm_options_);
  }

  std::unique_ptr<Transport> regroup(const std::vector<int>& leaving,
                                     const std::vector<std::string>& command,
                                     const std::vector<NewProcess>& add) override {
    const bool stays = std::find(leaving.begin(), leaving.end(), topo_.rank) == leaving.end();
    MPI_Comm kept = MPI_COMM_NULL;
    check(MPI_Comm_split(data_, stays ? 0 : MPI_UNDEFINED, topo_.rank, &kept), "MPI_Comm_split");
    if (!stays) return nullptr;
    MPI_Comm world = kept;
    if (!add.empty()) {
      if (command.empty()) throw Error(Status::InvalidArgument, "regroup: no command to start");
      const int n = static_cast<int>(add.size());
      // One command per new process, so each gets its own environment and host.
      std::vector<char*> args;
      for (size_t i = 1; i < command.size(); ++i) args.push_back(const_cast<char*>(command[i].c_str()));
      args.push_back(nullptr);
      std::vector<char*> commands(n, const_cast<char*>(command[0].c_str()));
      std::vector<char**> argvs(n, args.data());
      std::vector<int> counts(n, 1), codes(n, MPI_SUCCESS);
      std::vector<MPI_Info> infos(n);
      for (int i = 0; i < n; ++i) {
        MPI_Info_create(&infos[i]);
        std::string env;
        for (const std::string& line : add[i].env) env += (env.empty() ? "" : "\n") + line;
        if (!env.empty()) MPI_Info_set(infos[i], "PMIX_ENVAR", env.c_str());
        if (!add[i].host.empty()) MPI_Info_set(infos[i], "host", add[i].host.c_str());
      }
      MPI_Comm children = MPI_COMM_NULL;
      int rc = MPI_Comm_spawn_multiple(n, commands.data(), argvs.data(), counts.data(),
                                       infos.data(), 0, kept, &children, codes.data());
      for (MPI_Info& info : infos) MPI_Info_free(&info);
      check(rc, ("MPI_Comm_spawn_multiple of " + std::to_string(n) + " process(es) running " +
                 command[0]).c_str());
      MPI_Comm_set_errhandler(children, MPI_ERRORS_RETURN);
      check(MPI_Intercomm_merge(children, 0, &world), "MPI_Intercomm_merge");
      MPI_Comm_free(&children);
      MPI_Comm_free(&kept);
    }
    MPI_Comm control, data;
    check(MPI_Comm_dup(world, &control), "MPI_Comm_dup");
    check(MPI_Comm_dup(world, &data), "MPI_Comm_dup");
    MPI_Comm_free(&world);
    return std::make_unique<MpiTransport>(control, data, limit_, shm_options_);
  }

  int post_send(const void* buf, size_t bytes, int peer) override {
    requests_.push_back(MPI_REQUEST_NULL);
    check(MPI_Isend(buf, as_count(bytes, "send"), MPI_BYTE, peer, 0, data_, &requests_.back()),
          "MPI_Isend");
    stats().bytes_sent += bytes;
    return static_cast<int>(requests_.size() - 1);
  }

  int post_recv(void* buf, size_t bytes, int peer) override {
    requests_.push_back(MPI_REQUEST_NULL);
    check(MPI_Irecv(buf, as_count(bytes, "recv"), MPI_BYTE, peer, 0, data_, &requests_.back()),
          "MPI_Irecv");
    stats().bytes_received += bytes;
    return static_cast<int>(requests_.size() - 1);
  }

  void wait(int id) override { check(MPI_Wait(&requests_[id], MPI_STATUS_IGNORE), "MPI_Wait"); }

  void wait_all() override {
    wait_all(requests_, "MPI_Waitall");
    requests_.clear();
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    // Large broadcasts go in pieces so no single count passes MPI's int limit.
    auto* p = static_cast<char*>(buf);
    size_t off = 0;
    do {
      const size_t n = std::min(limit_, bytes - off);
      check(MPI_Bcast(p + off, static_cast<int>(n), MPI_BYTE, root, data_), "MPI_Bcast");
      off += n;
    } while (off < bytes);
    if (topo_.rank == root) {
      stats().bytes_sent += bytes * static_cast<size_t>(topo_.size - 1);
    } else {
      stats().bytes_received += bytes;
    }
  }

  // Every rank knows every block's size, so all take the same path.
  void allgatherv(const void* send, size_t send_bytes, void* recv,
                  const std::vector<size_t>& bytes_per_rank) override {
    count_exchange(std::vector<size_t>(topo_.size, send_bytes), bytes_per_rank);
    std::vector<size_t> displs = offsets_of(bytes_per_rank);
    if (fits_one_call(bytes_per_rank, limit_)) {
      check(MPI_Allgatherv(send, static_cast<int>(send_bytes), MPI_BYTE, recv,
                           to_ints(bytes_per_rank).data(), to_ints(displs).data(), MPI_BYTE, data_),
            "MPI_Allgatherv");
      return;
    }
    // Too large for one call: my block to every peer and every peer's block to me, each sent as
    // pieces under the limit (an MPI-3 library has no large-count collectives).
    const int me = topo_.rank;
    std::vector<size_t> send_to(topo_.size, send_bytes), send_at(topo_.size, 0);
    exchange_in_pieces(send, send_to, send_at, recv, bytes_per_rank, displs);
    copy_own_block(send, static_cast<char*>(recv) + displs[me], send_bytes);
  }

  // A rank knows only its own send and receive sizes: the ranks agree on the path first.
  void alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes) override {
    count_exchange(send_bytes, recv_bytes);
    std::vector<size_t> sdispls = offsets_of(send_bytes), rdispls = offsets_of(recv_bytes);
    int too_large = !(fits_one_call(send_bytes, limit_) && fits_one_call(recv_bytes, limit_));
    check(MPI_Allreduce(MPI_IN_PLACE, &too_large, 1, MPI_INT, MPI_LOR, data_), "MPI_Allreduce");
    if (!too_large) {
      check(MPI_Alltoallv(send, to_ints(send_bytes).data(), to_ints(sdispls).data(), MPI_BYTE,
                          recv, to_ints(recv_bytes).data(), to_ints(rdispls).data(), MPI_BYTE,
                          data_),
            "MPI_Alltoallv");
      return;
    }
    const int me = topo_.rank;
    exchange_in_pieces(send, send_bytes, sdispls, recv, recv_bytes, rdispls);
    copy_own_block(static_cast<const char*>(send) + sdispls[me],
                   static_cast<char*>(recv) + rdispls[me], send_bytes[me]);
  }

  std::vector<int64_t> alltoall_counts(const std::vector<int64_t>& send) override {
    std::vector<int64_t> recv(send.size());
    check(MPI_Alltoall(send.data(), 1, MPI_INT64_T, recv.data(), 1, MPI_INT64_T, data_),
          "MPI_Alltoall");
    return recv;
  }

  void barrier() override { check(MPI_Barrier(data_), "MPI_Barrier"); }

  void start_control_and(uint64_t* words, size_t count) override {
    stats().control_bytes_sent += count * sizeof(uint64_t);
    // Every rank passes the same count, so every rank takes the same path.
    if (shm_board_ && count <= shm_board_->capacity_words()) {
      shm_board_->start_and(words, count);
      ring_peers();
      stats().shared_memory_swaps += 1;
      shm_swapping_ = true;
      shm_polls_ = 0;
      return;
    }
    check(MPI_Iallreduce(MPI_IN_PLACE, words, static_cast<int>(count), MPI_UINT64_T, MPI_BAND,
                         control_, &control_request_),
          "MPI_Iallreduce");
  }

  bool start_control_gather(const uint64_t* send, size_t count) override {
    // Every rank passes the same count, so every rank takes the same path.
    if (!shm_board_ || count > shm_board_->capacity_words()) return false;
    stats().control_bytes_sent += count * sizeof(uint64_t);
    shm_board_->start_gather(send, count);
    ring_peers();
    stats().shared_memory_swaps += 1;
    shm_swapping_ = true;
    shm_polls_ = 0;
    return true;
  }

  const uint64_t* control_packet(int rank) override { return shm_board_->packet(rank); }

  bool start_control_swap(const uint64_t* send, uint64_t* recv, size_t count) override {
    if (topo_.size != 2) return false;
    stats().control_bytes_sent += count * sizeof(uint64_t);
    // Both ranks pass the same count, so both take the same path.
    if (shm_swap_ && count <= shm_swap_->capacity_words()) {
      shm_swap_->start(send, recv, count);
      ring_peers();
      stats().shared_memory_swaps += 1;
      shm_swapping_ = true;
      shm_polls_ = 0;
      return true;
    }
    const int peer = 1 - topo_.rank;
    // In pieces that each go eagerly: a larger message would take MPI's rendezvous (an extra
    // round trip), which costs more than the extra messages.
    swap_requests_.clear();
    for (size_t at = 0; at < count; at += kSwapPieceWords) {
      const int n = static_cast<int>(std::min(kSwapPieceWords, count - at));
      swap_requests_.emplace_back();
      check(MPI_Irecv(recv + at, n, MPI_UINT64_T, peer, kSwapTag, control_, &swap_requests_.back()),
            "MPI_Irecv");
      swap_requests_.emplace_back();
      check(MPI_Isend(send + at, n, MPI_UINT64_T, peer, kSwapTag, control_, &swap_requests_.back()),
            "MPI_Isend");
    }
    swapping_ = true;
    return true;
  }

  bool test_control() override {
    int done = 0;
    if (shm_swapping_) {
      if (shm_swap_ ? shm_swap_->test() : shm_board_->test()) {
        shm_swapping_ = false;
        peer_waited();
        return true;
      }
      waiting_for_peer(++shm_polls_);
      return false;
    }
    if (swapping_) {
      swap_statuses_.resize(swap_requests_.size());
      const int rc = MPI_Testall(static_cast<int>(swap_requests_.size()), swap_requests_.data(),
                                 &done, swap_statuses_.data());
      check(error_in_statuses(rc, swap_statuses_), "MPI_Testall");
      if (done) swapping_ = false;
    } else {
      check(MPI_Test(&control_request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
    }
    return done != 0;
  }

  std::vector<std::vector<uint8_t>> gather_control(const std::vector<uint8_t>& mine) override {
    int n = as_count(mine.size(), "control gather");
    std::vector<int> sizes(topo_.rank == 0 ? topo_.size : 0);
    check(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, control_), "MPI_Gather");
    std::vector<int> displs(sizes.size(), 0);
    size_t total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      displs[i] = static_cast<int>(total);
      total += sizes[i];
    }
    std::vector<uint8_t> all(total);
    if (topo_.rank != 0) stats().control_bytes_sent += mine.size();
    check(MPI_Gatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), displs.data(), MPI_BYTE,
                      0, control_),
          "MPI_Gatherv");
    std::vector<std::vector<uint8_t>> out(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      out[i].assign(all.begin() + displs[i], all.begin() + displs[i] + sizes[i]);
    }
    return out;
  }

  void broadcast_control(std::vector<uint8_t>& bytes) override {
    int64_t n = static_cast<int64_t>(bytes.size());
    check(MPI_Bcast(&n, 1, MPI_INT64_T, 0, control_), "MPI_Bcast");
    bytes.resize(static_cast<size_t>(n));
    if (topo_.rank == 0) stats().control_bytes_sent += bytes.size() * (topo_.size - 1);
    check(MPI_Bcast(bytes.data(), as_count(bytes.size(), "control broadcast"), MPI_BYTE, 0, control_),
          "MPI_Bcast");
  }

  std::unique_ptr<Transport> split(int color, int key, SplitFor use) override {
    // Each group runs on its own thread, so MPI must allow calls from several at once. The
    // thread level is the same on every rank, so all of them refuse together.
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      throw Error(Status::InvalidArgument,
                  "process sets need an MPI initialised with MPI_THREAD_MULTIPLE (each set's "
                  "collectives run on their own thread); this MPI provides less");
    }
    const int c = color < 0 ? MPI_UNDEFINED : color;
    MPI_Comm control, data;
    check(MPI_Comm_split(control_, c, key, &control), "MPI_Comm_split");
    check(MPI_Comm_split(data_, c, key, &data), "MPI_Comm_split");
    if (control == MPI_COMM_NULL) return nullptr;
    // A hierarchical stage runs only the halves of an all-reduce, never in lanes: one area.
    const bool process_set = use == SplitFor::ProcessSet;
    SharedMemoryOptions shm = shm_options_;
    if (!process_set) shm.lanes = 1;
    auto child = std::make_unique<MpiTransport>(control, data, limit_, shm, process_set);
    child->count_into(*this);
    return child;
  }

  // Point-to-point on the control communicator, on its own tag: MPI never matches these
  // with the communicator's collectives.
  void send_side(const std::vector<uint8_t>& bytes, int peer) override {
    for (auto it = side_sends_.begin(); it != side_sends_.end();) {  // forget finished sends
      int done = 0;
      check(MPI_Test(&it->second, &done, MPI_STATUS_IGNORE), "MPI_Test");
      it = done ? side_sends_.erase(it) : std::next(it);
    }
    side_sends_.emplace_back(bytes, MPI_REQUEST_NULL);
    auto& sent = side_sends_.back();
    check(MPI_Isend(sent.first.data(), as_count(sent.first.size(), "side message"), MPI_BYTE, peer,
                    kSideTag, control_, &sent.second),
          "MPI_Isend");
  }

  bool poll_side(std::vector<uint8_t>& bytes, int& from) override {
    int arrived = 0;
    MPI_Status status;
    check(MPI_Iprobe(MPI_ANY_SOURCE, kSideTag, control_, &arrived, &status), "MPI_Iprobe");
    if (!arrived) return false;
    int n = 0;
    MPI_Get_count(&status, MPI_BYTE, &n);
    bytes.resize(static_cast<size_t>(n));
    check(MPI_Recv(bytes.data(), n, MPI_BYTE, status.MPI_SOURCE, kSideTag, control_, MPI_STATUS_IGNORE),
          "MPI_Recv");
    from = status.MPI_SOURCE;
    return true;
  }

  std::shared_ptr<PeerChannel> peer_channel() override { return peer_; }

  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

  SharedArea shared_area() override { return lane_area(0); }
  int lanes() override { return segment_ ? lanes_ : 1; }
  SharedArea lane_area(int lane) override {
    if (!segment_ || lane < 0 || lane >= lanes_) return {};
    const size_t area = shared_area_bytes(topo_.size);
    return {static_cast<char*>(negotiation_part()) + swap_part_bytes() + static_cast<size_t>(lane) * area, area};
  }

  void waiting_for_peer(uint64_t polls) override {
    // Spin briefly (a peer microseconds away), then yield the core, as MPI's own polling does
    // (mpi_yield_when_idle); a wait that lasts sleeps until a peer rings (Note [doorbell]):
    // on a busy machine the peer may be waiting for this very core.
    if (polls <= kPollsBeforeYield) {
      if (doorbell_) doorbell_->leave();  // progress since the last wait
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (polls == kPollsBeforeYield + 1) shm_waiting_since_ = now;
    if (doorbell_ && now - shm_waiting_since_ >= std::chrono::microseconds(shm_options_.sleep_after_us)) {
      if (!doorbell_->enlisted()) stats().shared_memory_sleeps += 1;  // a wait's first sleep
      doorbell_->sleep(kLongestSleep);
    } else {
      sched_yield();
    }
    check_peer_alive(now);
  }

  void peer_waited() override {
    if (doorbell_) doorbell_->leave();
    stop_liveness_check();
  }

  void ring_peers() override {
    if (doorbell_) doorbell_->ring();
  }

  bool control_waits_sleep() const override { return shm_swapping_ && doorbell_; }

 private:
  // A failed call: when it failed because a rank died (ULFM), both channels are revoked first,
  // so every survivor's pending and next call fails too and all of them reach recovery.
  void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    if (fault_tolerance::is_process_failure(rc)) {
      fault_tolerance::revoke(data_);
      fault_tolerance::revoke(control_);
      throw Error(Status::RanksLost, std::string(what) + " failed: a rank of the job was lost (" +
                  error_string(rc) + ")");
    }
    hvdlite::check(rc, what);
  }

  // The segment's part for negotiation, after the doorbell's, rounded to a page: the swap's
  // mailboxes at 2 ranks, the board's at more.
  void* negotiation_part() const { return static_cast<char*>(segment_->data()) + kDoorbellPartBytes; }
  size_t swap_part_bytes() const {
    const size_t bytes = topo_.size == 2 ? ShmSwap::segment_bytes(kShmSwapWords)
                                         : ShmBoard::segment_bytes(topo_.size, kShmBoardWords);
    return (bytes + 4095) / 4096 * 4096;
  }

  // All ranks on one host: a segment all of them map carries the doorbell (shm_doorbell.h),
  // negotiation (the swap at 2 ranks, shm_swap.h; the board's AND at more, shm_board.h) and,
  // after that, the data path's areas (lane_area()). Collective; where a rank cannot map it, negotiation stays MPI messages
  // and all-reduces take the other algorithms.
  void share_memory() {
    static std::atomic<int> segments{0};
    lanes_ = lanes_for(shm_options_.lanes, topo_.local_size, shared_area_bytes(topo_.size), shm_options_.idle_lanes);
    check(MPI_Allreduce(MPI_IN_PLACE, &lanes_, 1, MPI_INT, MPI_MIN, data_), "MPI_Allreduce");
    const size_t bytes =
        kDoorbellPartBytes + swap_part_bytes() + static_cast<size_t>(lanes_) * shared_area_bytes(topo_.size);
    char name[64] = {0};
    std::unique_ptr<SharedSegment> segment;
    if (topo_.rank == 0) {
      const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
      std::snprintf(name, sizeof(name), "/hvdlite-swap.%d.%d.%llx", static_cast<int>(getpid()),
                    segments++, static_cast<unsigned long long>(stamp));
      segment = SharedSegment::create(name, bytes);
      if (!segment) name[0] = 0;
    }
    check(MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, data_), "MPI_Bcast");
    if (topo_.rank != 0 && name[0]) segment = SharedSegment::open(name, bytes);
    int mapped = segment != nullptr;
    const int rc = MPI_Allreduce(MPI_IN_PLACE, &mapped, 1, MPI_INT, MPI_LAND, data_);
    if (topo_.rank == 0 && name[0]) SharedSegment::unlink(name);
    check(rc, "MPI_Allreduce");
    if (!mapped) return;
    segment_ = std::move(segment);
    if (shm_options_.sleep_after_us > 0) doorbell_ = std::make_unique<ShmDoorbell>(segment_->data());
    if (topo_.size == 2) {
      shm_swap_ = std::make_unique<ShmSwap>(negotiation_part(), kShmSwapWords, topo_.rank);
    } else {
      shm_board_ = std::make_unique<ShmBoard>(negotiation_part(), topo_.size, kShmBoardWords, topo_.rank);
    }
  }

  // A wait through shared memory never hears of a lost peer by itself: while it lasts long,
  // a receive from each peer (on a tag nobody sends on) stands in, which MPI fails when that
  // peer is lost (with ULFM; without it, MPI ends the job). The error names the peer.
  void check_peer_alive(std::chrono::steady_clock::time_point now) {
    if (now - shm_waiting_since_ < kLivenessCheckAfter) return;
    if (liveness_.empty()) {
      liveness_.assign(static_cast<size_t>(topo_.size), MPI_REQUEST_NULL);
      liveness_bytes_.assign(static_cast<size_t>(topo_.size), 0);
      for (int p = 0; p < topo_.size; ++p) {
        if (p == topo_.rank) continue;
        check(MPI_Irecv(&liveness_bytes_[p], 1, MPI_BYTE, p, kLivenessTag, control_, &liveness_[p]),
              "MPI_Irecv");
      }
    }
    for (int p = 0; p < topo_.size; ++p) {
      if (liveness_[p] == MPI_REQUEST_NULL) continue;
      int arrived = 0;
      const int rc = MPI_Test(&liveness_[p], &arrived, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        check(rc, ("MPI_Test (the receive watching rank " + std::to_string(p) + "'s liveness during a wait through shared memory)").c_str());
      }
    }
  }

  void stop_liveness_check() {
    for (MPI_Request& r : liveness_) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    liveness_.clear();
  }

  // This transport's ranks that are not in `survivors`.
  std::vector<int> missing_from(MPI_Comm survivors) const {
    MPI_Group mine, theirs;
    MPI_Comm_group(data_, &mine);
    MPI_Comm_group(survivors, &theirs);
    std::vector<int> ranks(topo_.size), mapped(topo_.size);
    for (int r = 0; r < topo_.size; ++r) ranks[r] = r;
    MPI_Group_translate_ranks(mine, topo_.size, ranks.data(), theirs, mapped.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&theirs);
    std::vector<int> lost;
    for (int r = 0; r < topo_.size; ++r) {
      if (mapped[r] == MPI_UNDEFINED) lost.push_back(r);
    }
    return lost;
  }

  // Sends send_bytes[p] bytes from send + send_at[p] to every peer p and receives recv_bytes[p]
  // bytes from p into recv + recv_at[p], in pieces of at most limit_ bytes. Pieces between two
  // ranks on one tag arrive in order (MPI's non-overtaking rule), so they need no numbering.
  // A collective's payload to and from the other ranks, whichever path carries it.
  void count_exchange(const std::vector<size_t>& to_peer, const std::vector<size_t>& from_peer) {
    for (int p = 0; p < topo_.size; ++p) {
      if (p == topo_.rank) continue;
      stats().bytes_sent += to_peer[p];
      stats().bytes_received += from_peer[p];
    }
  }

  void exchange_in_pieces(const void* send, const std::vector<size_t>& send_bytes,
                          const std::vector<size_t>& send_at, void* recv,
                          const std::vector<size_t>& recv_bytes,
                          const std::vector<size_t>& recv_at) {
    const int tag = 1;  // the ring uses tag 0 on this communicator
    std::vector<MPI_Request> reqs;
    for (int p = 0; p < topo_.size; ++p) {
      if (p == topo_.rank) continue;
      auto* in = static_cast<char*>(recv) + recv_at[p];
      for (size_t off = 0; off < recv_bytes[p]; off += limit_) {
        reqs.emplace_back();
        check(MPI_Irecv(in + off, static_cast<int>(std::min(limit_, recv_bytes[p] - off)), MPI_BYTE,
                        p, tag, data_, &reqs.back()),
              "MPI_Irecv");
      }
    }
    for (int k = 1; k < topo_.size; ++k) {
      const int p = (topo_.rank + k) % topo_.size;  // staggered, so peers are not all hit at once
      auto* out = static_cast<const char*>(send) + send_at[p];
      for (size_t off = 0; off < send_bytes[p]; off += limit_) {
        reqs.emplace_back();
        check(MPI_Isend(out + off, static_cast<int>(std::min(limit_, send_bytes[p] - off)), MPI_BYTE,
                        p, tag, data_, &reqs.back()),
              "MPI_Isend");
      }
    }
    wait_all(reqs, "MPI_Waitall");
  }

  // MPI_Waitall, its failure classified by the requests' own errors (Note [errors in statuses]).
  void wait_all(std::vector<MPI_Request>& reqs, const char* what) {
    statuses_.resize(reqs.size());
    const int rc = MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), statuses_.data());
    check(error_in_statuses(rc, statuses_), what);
  }

  static void copy_own_block(const void* from, void* to, size_t bytes) {
    if (bytes && from != to) std::memcpy(to, from, bytes);
  }

  size_t limit_;  // largest count given to one MPI collective call
  SharedMemoryOptions shm_options_;
  int lanes_ = 1;     // of the shared area, agreed by every rank (share_memory)
  Topology topo_;
  MPI_Comm control_ = MPI_COMM_NULL;
  MPI_Comm data_ = MPI_COMM_NULL;
  MPI_Request control_request_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> swap_requests_;
  std::vector<MPI_Status> swap_statuses_;  // kept for their errors (Note [errors in statuses])
  bool swapping_ = false;  // the round in flight is a swap (start_control_swap)
  static constexpr int kSwapTag = 18;
  // Under Open MPI's shared-memory eager limit (btl_sm_eager_limit, 4 KiB including its
  // header): a larger message goes by single copy (process_vm_readv), slower at this size.
  static constexpr size_t kSwapPieceWords = (4096 - 128) / sizeof(uint64_t);
  // Shared-memory swaps (2 ranks on one host): room for the largest merged round's packet
  // (16 KiB of data, controller.cc) and a generous set of control words.
  static constexpr size_t kShmSwapWords = 4096;
  // About a microsecond of looking: the controller first looks 64 times without reading the
  // clock (Controller::wait_for_round), then between clock reads.
  static constexpr uint64_t kPollsBeforeYield = 80;
  static constexpr std::chrono::milliseconds kLivenessCheckAfter{1};
  // A wait through shared memory that sleeps on the doorbell sleeps at most this long at a
  // time (the liveness check runs between sleeps).
  static constexpr std::chrono::microseconds kLongestSleep{1000};
  // The segment begins with the doorbell (Note [doorbell]), alone on its page.
  static constexpr size_t kDoorbellPartBytes = 4096;
  static_assert(ShmDoorbell::kBytes <= kDoorbellPartBytes, "the doorbell fits its part");
  static constexpr int kLivenessTag = 19;
  std::unique_ptr<SharedSegment> segment_;  // the swap's mailboxes (2 ranks), then shared_area()
  std::unique_ptr<ShmDoorbell> doorbell_;  // at the segment's start, where there is one
  std::unique_ptr<ShmSwap> shm_swap_;
  // More ranks on one host: the negotiation's AND (bit vectors of a few hundred words).
  // Room for the negotiation's words and up to HVDLITE_BOARD_ALLREDUCE_MAX_BYTES of data.
  static constexpr size_t kShmBoardWords = 2304;
  std::unique_ptr<ShmBoard> shm_board_;
  bool shm_swapping_ = false;  // the round in flight goes through shared memory (swap or board)
  uint64_t shm_polls_ = 0;     // of the round in flight
  std::chrono::steady_clock::time_point shm_waiting_since_;  // when the wait on the peer began yielding
  std::vector<MPI_Request> liveness_;  // per peer, while a wait through shared memory lasts
  std::vector<char> liveness_bytes_;
  std::vector<MPI_Request> requests_;
  std::vector<MPI_Status> statuses_;  // wait_all's, kept for their errors
  static constexpr int kSideTag = 17;
  std::list<std::pair<std::vector<uint8_t>, MPI_Request>> side_sends_;  // buffers of sends in flight
  // User point-to-point; transfers in flight share it, so its communicator is freed after them.
  std::shared_ptr<PeerChannel> peer_;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(size_t max_transfer_bytes, const SharedMemoryOptions& shm) {
  if (!mpi::loaded()) {
    throw Error(Status::Internal, "no MPI library is loaded (hvdlite.init() loads one first)");
  }
  return MpiTransport::world(max_transfer_bytes, shm);
}

const char* mpi_library_version() {
  static char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  if (!version[0] && mpi::loaded()) {
    int len = 0;
    MPI_Get_library_version(version, &len);
  }
  return version;
}

bool mpi_fault_tolerant() { return mpi::loaded() && fault_tolerance::available(); }

void finalize_mpi_if_owned() {
  if (!mpi::loaded()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_we_initialized_mpi && !finalized) MPI_Finalize();
}

}  // namespace hvdlite
