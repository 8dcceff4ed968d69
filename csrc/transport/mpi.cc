// The MPI backend: two private duplicates of MPI_COMM_WORLD, one for negotiation (control)
// and one for tensor data, so neither can mix with the other or with the user's own MPI.
#include <mpi.h>

#include <climits>
#include <string>

#include "../hvdlite.h"
#include "transport.h"

namespace hvdlite {
namespace {

bool g_we_initialized_mpi = false;

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(Status::Internal, std::string(what) + " failed: " + std::string(msg, len));
}

int as_count(size_t bytes, const char* what) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    throw Error(Status::InvalidArgument, std::string(what) + ": a single transfer of " +
                std::to_string(bytes) + " bytes exceeds MPI's 2 GiB count limit");
  }
  return static_cast<int>(bytes);
}

std::vector<int> counts_and_displs(const std::vector<size_t>& bytes, std::vector<int>& displs,
                                   const char* what) {
  std::vector<int> counts(bytes.size());
  displs.assign(bytes.size(), 0);
  size_t offset = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    counts[i] = as_count(bytes[i], what);
    displs[i] = as_count(offset, what);
    offset += bytes[i];
  }
  return counts;
}

class MpiTransport : public Transport {
 public:
  MpiTransport() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
      g_we_initialized_mpi = true;
    }
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      throw Error(Status::Internal,
                  "MPI was initialised without thread support (MPI_THREAD_SERIALIZED or better is "
                  "needed: hvdlite calls MPI from its background thread)");
    }
    check(MPI_Comm_dup(MPI_COMM_WORLD, &control_), "MPI_Comm_dup");
    check(MPI_Comm_dup(MPI_COMM_WORLD, &data_), "MPI_Comm_dup");
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
    MPI_Comm_free(&local);
    MPI_Comm_free(&cross);
  }

  ~MpiTransport() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      MPI_Comm_free(&control_);
      MPI_Comm_free(&data_);
    }
  }

  const Topology& topology() const override { return topo_; }

  int post_send(const void* buf, size_t bytes, int peer) override {
    requests_.push_back(MPI_REQUEST_NULL);
    check(MPI_Isend(buf, as_count(bytes, "send"), MPI_BYTE, peer, 0, data_, &requests_.back()),
          "MPI_Isend");
    stats_.bytes_sent += bytes;
    return static_cast<int>(requests_.size() - 1);
  }

  int post_recv(void* buf, size_t bytes, int peer) override {
    requests_.push_back(MPI_REQUEST_NULL);
    check(MPI_Irecv(buf, as_count(bytes, "recv"), MPI_BYTE, peer, 0, data_, &requests_.back()),
          "MPI_Irecv");
    stats_.bytes_received += bytes;
    return static_cast<int>(requests_.size() - 1);
  }

  void wait(int id) override { check(MPI_Wait(&requests_[id], MPI_STATUS_IGNORE), "MPI_Wait"); }

  void wait_all() override {
    check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall");
    requests_.clear();
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    // Large broadcasts go in pieces so no single count passes MPI's int limit.
    const size_t piece = size_t(1) << 30;
    auto* p = static_cast<char*>(buf);
    for (size_t off = 0; off < bytes || off == 0; off += piece) {
      size_t n = std::min(piece, bytes - off);
      check(MPI_Bcast(p + off, static_cast<int>(n), MPI_BYTE, root, data_), "MPI_Bcast");
      if (bytes == 0) break;
    }
    if (topo_.rank == root) {
      stats_.bytes_sent += bytes * static_cast<size_t>(topo_.size - 1);
    } else {
      stats_.bytes_received += bytes;
    }
  }

  void allgatherv(const void* send, size_t send_bytes, void* recv,
                  const std::vector<size_t>& bytes_per_rank) override {
    std::vector<int> displs;
    std::vector<int> counts = counts_and_displs(bytes_per_rank, displs, "allgather");
    check(MPI_Allgatherv(send, as_count(send_bytes, "allgather"), MPI_BYTE, recv, counts.data(),
                         displs.data(), MPI_BYTE, data_),
          "MPI_Allgatherv");
    size_t total = 0;
    for (size_t b : bytes_per_rank) total += b;
    stats_.bytes_sent += send_bytes * static_cast<size_t>(topo_.size - 1);
    stats_.bytes_received += total - bytes_per_rank[topo_.rank];
  }

  void alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes) override {
    std::vector<int> sdispls, rdispls;
    std::vector<int> scounts = counts_and_displs(send_bytes, sdispls, "alltoall");
    std::vector<int> rcounts = counts_and_displs(recv_bytes, rdispls, "alltoall");
    check(MPI_Alltoallv(send, scounts.data(), sdispls.data(), MPI_BYTE, recv, rcounts.data(),
                        rdispls.data(), MPI_BYTE, data_),
          "MPI_Alltoallv");
    for (int i = 0; i < topo_.size; ++i) {
      if (i == topo_.rank) continue;
      stats_.bytes_sent += send_bytes[i];
      stats_.bytes_received += recv_bytes[i];
    }
  }

  std::vector<int64_t> alltoall_counts(const std::vector<int64_t>& send) override {
    std::vector<int64_t> recv(send.size());
    check(MPI_Alltoall(send.data(), 1, MPI_INT64_T, recv.data(), 1, MPI_INT64_T, data_),
          "MPI_Alltoall");
    return recv;
  }

  void barrier() override { check(MPI_Barrier(data_), "MPI_Barrier"); }

  void start_control_and(uint64_t* words, size_t count) override {
    stats_.control_bytes_sent += count * sizeof(uint64_t);
    check(MPI_Iallreduce(MPI_IN_PLACE, words, static_cast<int>(count), MPI_UINT64_T, MPI_BAND,
                         control_, &control_request_),
          "MPI_Iallreduce");
  }

  bool test_control() override {
    int done = 0;
    check(MPI_Test(&control_request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
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
    if (topo_.rank != 0) stats_.control_bytes_sent += mine.size();
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
    if (topo_.rank == 0) stats_.control_bytes_sent += bytes.size() * (topo_.size - 1);
    check(MPI_Bcast(bytes.data(), as_count(bytes.size(), "control broadcast"), MPI_BYTE, 0, control_),
          "MPI_Bcast");
  }

  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

 private:
  Topology topo_;
  MPI_Comm control_ = MPI_COMM_NULL;
  MPI_Comm data_ = MPI_COMM_NULL;
  MPI_Request control_request_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> requests_;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport() { return std::make_unique<MpiTransport>(); }

const char* mpi_library_version() {
  static char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  if (!version[0]) {
    int len = 0;
    MPI_Get_library_version(version, &len);
  }
  return version;
}

void finalize_mpi_if_owned() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_we_initialized_mpi && !finalized) MPI_Finalize();
}

}  // namespace hvdlite
