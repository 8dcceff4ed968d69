// Note [matched probes for user receives]
// A receive is not posted as MPI_Irecv: Open MPI 5 writes past the buffer of a receive that is
// too small for a message above its eager limit (MPI_ERR_TRUNCATE, then heap corruption; seen
// with 5000 bytes into 10). Instead each receive probes for its message (MPI_Improbe), checks
// the size, and only then receives it (MPI_Imrecv) into the tensor, or into a scratch buffer
// of the message's size when the sizes differ. To keep MPI's order (a message goes to the
// earliest-posted receive that matches), unmatched receives wait in one list in posting order
// and every progress pass probes for them in that order, under one lock. A probe is not atomic
// with the ones before it: a message may arrive after an earlier receive found nothing, and
// would go to a later one that also matches it (seen: a 0-d tensor's receive got the empty
// message sent after it). So a receive whose messages an earlier waiting receive could take
// does not probe in that pass, and a receive from any source first looks (MPI_Iprobe) at
// whose message is first and leaves it when an earlier receive waits for that rank.
#include "transport/mpi_peer_channel.h"

#include <climits>
#include <list>
#include <mutex>
#include <string>
#include <vector>

#include "hvdlite.h"
#include "transport/fault_tolerance.h"

namespace hvdlite {
namespace {

std::string mpi_error(int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return std::string(msg, len);
}

Status failure_status(int rc) {
  return fault_tolerance::is_process_failure(rc) ? Status::RanksLost : Status::Internal;
}

void check_mpi(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  throw Error(failure_status(rc), what + " failed: " + mpi_error(rc));
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// A Work may outlive hvdlite (shut down, MPI finalized): no MPI call may follow.
void check_not_finalized(const char* what) {
  if (mpi_finalized()) {
    throw Error(Status::ShutDown, std::string(what) + ": hvdlite was shut down (MPI finalized) "
                "while the transfer was in flight");
  }
}

std::string peer_name(int peer) {
  return peer == PeerChannel::kAnySource ? "any rank" : "rank " + std::to_string(peer);
}

// One receive, shared by its transfer and (until matched) the channel's list.
struct Receive {
  void* buf;
  size_t bytes;
  int peer, tag;
  bool matched = false;       // written under the channel's lock
  int source = -1;
  size_t message_bytes = 0;
  std::vector<uint8_t> scratch;  // a message of the wrong size lands here
  MPI_Request request = MPI_REQUEST_NULL;
  std::string error;          // set when the transfer failed
  Status status = Status::InvalidArgument;  // of `error`: a size mismatch unless MPI failed
};

class MpiPeerChannel : public PeerChannel, public std::enable_shared_from_this<MpiPeerChannel> {
 public:
  explicit MpiPeerChannel(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int* ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &found);
    max_tag_ = found && ub ? *ub : 32767;
  }

  ~MpiPeerChannel() override {
    if (!mpi_finalized()) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<PeerTransfer> send(const void* buf, size_t bytes, int peer, int tag) override;
  std::unique_ptr<PeerTransfer> recv(void* buf, size_t bytes, int peer, int tag) override;

  // One progress pass over the unmatched receives, in posting order (the Note).
  void match() {
    std::lock_guard<std::mutex> lk(mu_);
    // Receives earlier in this pass that found nothing: a message that arrives while the pass
    // runs is theirs, not a later receive's that could also take it.
    std::vector<const Receive*> waiting;
    auto earlier_takes = [&](const Receive& r, int source) {
      for (const Receive* q : waiting) {
        if (q->tag == r.tag && (q->peer == kAnySource || q->peer == source)) return true;
      }
      return false;
    };
    for (auto it = unmatched_.begin(); it != unmatched_.end();) {
      Receive& r = **it;
      int source = r.peer;
      int rc = MPI_SUCCESS;
      if (r.peer == kAnySource) {
        source = MPI_ANY_SOURCE;
        bool same_tag = false;
        for (const Receive* q : waiting) same_tag = same_tag || q->tag == r.tag;
        if (same_tag) {
          // Some sources are an earlier receive's: look at the first message before taking it.
          int arrived = 0;
          MPI_Status first;
          rc = MPI_Iprobe(MPI_ANY_SOURCE, r.tag, comm_, &arrived, &first);
          if (rc == MPI_SUCCESS && (!arrived || earlier_takes(r, first.MPI_SOURCE))) {
            waiting.push_back(&r);
            ++it;
            continue;
          }
          source = first.MPI_SOURCE;
        }
      } else if (earlier_takes(r, r.peer)) {
        waiting.push_back(&r);
        ++it;
        continue;
      }
      int found = 0;
      MPI_Message message;
      MPI_Status status;
      if (rc == MPI_SUCCESS) rc = MPI_Improbe(source, r.tag, comm_, &found, &message, &status);
      if (rc != MPI_SUCCESS) {
        r.matched = true;
        r.status = failure_status(rc);
        r.error = "recv from " + peer_name(r.peer) + " (tag " + std::to_string(r.tag) +
                  "): MPI_Improbe failed: " + mpi_error(rc);
        it = unmatched_.erase(it);
        continue;
      }
      if (!found) {
        waiting.push_back(&r);
        ++it;
        continue;
      }
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      r.source = status.MPI_SOURCE;
      r.message_bytes = static_cast<size_t>(count);
      void* into = r.buf;
      if (r.message_bytes != r.bytes) {
        r.scratch.resize(r.message_bytes);
        into = r.scratch.data();
        r.error = "recv from rank " + std::to_string(r.source) + " (tag " + std::to_string(r.tag) +
                  "): the message has " + std::to_string(r.message_bytes) +
                  " bytes but the receiving tensor has " + std::to_string(r.bytes) +
                  " bytes; send and recv need tensors of the same size";
      }
      const int rc2 = MPI_Imrecv(into, count, MPI_BYTE, &message, &r.request);
      if (rc2 != MPI_SUCCESS) {
        r.status = failure_status(rc2);
        r.error = "recv from rank " + std::to_string(r.source) + ": MPI_Imrecv failed: " + mpi_error(rc2);
        r.request = MPI_REQUEST_NULL;
      }
      r.matched = true;
      it = unmatched_.erase(it);
    }
  }

  void add(const std::shared_ptr<Receive>& r) {
    std::lock_guard<std::mutex> lk(mu_);
    unmatched_.push_back(r);
  }
  bool matched(const Receive& r) {
    std::lock_guard<std::mutex> lk(mu_);
    return r.matched;
  }
  // Takes an unmatched receive off the list; false when a message matched it already.
  bool withdraw(const std::shared_ptr<Receive>& r) {
    std::lock_guard<std::mutex> lk(mu_);
    if (r->matched) return false;
    unmatched_.remove(r);
    return true;
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1, max_tag_ = 32767;
  std::mutex mu_;
  std::list<std::shared_ptr<Receive>> unmatched_;  // guarded by mu_, in posting order
};

int as_count(size_t bytes, const char* what, int peer) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    throw Error(Status::InvalidArgument,
                std::string(what) + " with " + peer_name(peer) + ": " + std::to_string(bytes) +
                " bytes is more than one point-to-point message may carry (2 GiB - 1); split "
                "the tensor");
  }
  return static_cast<int>(bytes);
}

class MpiSend : public PeerTransfer {
 public:
  MpiSend(std::shared_ptr<MpiPeerChannel> channel, int peer, int tag, MPI_Request request)
      : channel_(std::move(channel)), peer_(peer), tag_(tag), request_(request) {}
  ~MpiSend() override { abandon(); }

  bool abandon() override {
    // Dropped unfinished (a Work nobody waited on): the message still goes out on its own.
    std::lock_guard<std::mutex> lk(mu_);
    if (request_ == MPI_REQUEST_NULL || mpi_finalized()) return false;
    MPI_Request_free(&request_);
    return true;
  }

  bool test() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (!error_.empty()) throw Error(status_, error_);
    if (request_ == MPI_REQUEST_NULL) return true;
    check_not_finalized("send");
    int done = 0;
    const int rc = MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      status_ = failure_status(rc);
      error_ = "send to rank " + std::to_string(peer_) + " (tag " + std::to_string(tag_) +
               ") failed: " + mpi_error(rc);
      request_ = MPI_REQUEST_NULL;
      throw Error(status_, error_);
    }
    return done != 0;
  }
  int source() const override { return channel_->rank(); }

 private:
  std::shared_ptr<MpiPeerChannel> channel_;  // its communicator outlives the request
  int peer_, tag_;
  std::mutex mu_;
  MPI_Request request_;
  Status status_ = Status::Internal;
  std::string error_;
};

class MpiRecv : public PeerTransfer {
 public:
  MpiRecv(std::shared_ptr<MpiPeerChannel> channel, std::shared_ptr<Receive> r)
      : channel_(std::move(channel)), r_(std::move(r)) {}
  ~MpiRecv() override { abandon(); }

  bool abandon() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (channel_->withdraw(r_) || r_->request == MPI_REQUEST_NULL || mpi_finalized()) return false;
    MPI_Request_free(&r_->request);  // a matched message still lands in the buffer
    return true;
  }

  bool test() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (!channel_->matched(*r_) || r_->request != MPI_REQUEST_NULL) check_not_finalized("recv");
    if (!channel_->matched(*r_)) {
      channel_->match();
      if (!channel_->matched(*r_)) return false;
    }
    if (r_->request != MPI_REQUEST_NULL) {
      int done = 0;
      MPI_Status status;
      const int rc = MPI_Test(&r_->request, &done, &status);
      if (rc != MPI_SUCCESS) {
        r_->status = failure_status(rc);
        r_->error = "recv from rank " + std::to_string(r_->source) + " (tag " +
                    std::to_string(r_->tag) + ") failed: " + mpi_error(rc);
        r_->request = MPI_REQUEST_NULL;
      } else if (!done) {
        return false;
      }
    }
    if (!r_->error.empty()) throw Error(r_->status, r_->error);
    return true;
  }
  int source() const override { return r_->source; }

 private:
  std::shared_ptr<MpiPeerChannel> channel_;
  std::shared_ptr<Receive> r_;
  std::mutex mu_;
};

std::unique_ptr<PeerTransfer> MpiPeerChannel::send(const void* buf, size_t bytes, int peer, int tag) {
  check_peer("send", peer, tag, max_tag_);
  const int count = as_count(bytes, "send", peer);
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Isend(buf, count, MPI_BYTE, peer, tag, comm_, &request),
            "send to rank " + std::to_string(peer) + ": MPI_Isend");
  return std::make_unique<MpiSend>(shared_from_this(), peer, tag, request);
}

std::unique_ptr<PeerTransfer> MpiPeerChannel::recv(void* buf, size_t bytes, int peer, int tag) {
  check_peer("recv", peer, tag, max_tag_);
  as_count(bytes, "recv", peer);
  auto r = std::make_shared<Receive>();
  r->buf = buf;
  r->bytes = bytes;
  r->peer = peer;
  r->tag = tag;
  add(r);
  return std::make_unique<MpiRecv>(shared_from_this(), std::move(r));
}

}  // namespace

std::shared_ptr<PeerChannel> make_mpi_peer_channel(MPI_Comm base) {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) return nullptr;  // the same on every rank
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(base, &comm), "MPI_Comm_dup (point-to-point channel)");
  return std::make_shared<MpiPeerChannel>(comm);
}

}  // namespace hvdlite
