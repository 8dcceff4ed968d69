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

#include <algorithm>
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

// One transfer, shared by its PeerTransfer and (while outstanding) the channel's lists. Every
// field past the first four is guarded by the channel's lock.
struct Transfer {
  bool is_send;
  void* buf;  // a send's is only read
  size_t bytes;
  int peer, tag;
  enum class State { Unmatched, Posted, Finished } state = State::Unmatched;
  int source = -1;
  size_t message_bytes = 0;
  std::vector<uint8_t> scratch;  // a message of the wrong size lands here
  MPI_Request request = MPI_REQUEST_NULL;
  std::string error;          // set when the transfer failed
  Status status = Status::InvalidArgument;  // of `error`: a size mismatch unless MPI failed

  std::string what() const {
    return std::string(is_send ? "send to " : "recv from ") +
           peer_name(is_send || state == State::Unmatched ? peer : source) + " (tag " +
           std::to_string(tag) + ")";
  }
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

  void progress() override {
    std::lock_guard<std::mutex> lk(mu_);
    if ((unmatched_.empty() && posted_.empty()) || mpi_finalized()) return;
    match();
    test_posted();
  }

  // True once `t` finished; throws its error. A progress pass first (the Note in the header).
  bool finished(Transfer& t) {
    progress_all();
    std::lock_guard<std::mutex> lk(mu_);
    if (t.state != Transfer::State::Finished) {
      check_not_finalized(t.is_send ? "send" : "recv");
      return false;
    }
    if (!t.error.empty()) throw Error(t.status, t.error);
    return true;
  }

  // The transfer's owner gives up on it (PeerTransfer::abandon).
  bool abandon(const std::shared_ptr<Transfer>& t) {
    std::lock_guard<std::mutex> lk(mu_);
    switch (t->state) {
      case Transfer::State::Finished:
        return false;
      case Transfer::State::Unmatched:  // withdrawn: no message will ever land in it
        unmatched_.remove(t);
        finish(*t);
        return false;
      case Transfer::State::Posted:
        break;
    }
    posted_.erase(std::find(posted_.begin(), posted_.end(), t));
    const bool in_use = !mpi_finalized();
    // A send still goes out on its own, a matched message still lands in the buffer (the
    // caller keeps that alive; a scratch buffer is kept here, with the channel).
    if (in_use) MPI_Request_free(&t->request);
    if (in_use && !t->scratch.empty()) abandoned_.push_back(t);
    finish(*t);
    return in_use;
  }

  void start(const std::shared_ptr<Transfer>& t) {
    std::lock_guard<std::mutex> lk(mu_);
    (t->state == Transfer::State::Posted ? posted_.push_back(t) : unmatched_.push_back(t));
    outstanding.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  void finish(Transfer& t) {
    t.state = Transfer::State::Finished;
    outstanding.fetch_sub(1, std::memory_order_relaxed);
  }

  void fail(Transfer& t, int rc, const char* call) {
    t.status = failure_status(rc);
    t.error = t.what() + ": " + call + " failed: " + mpi_error(rc);
  }

  // Posts the unmatched receives whose message has come, in posting order (Note [matched
  // probes for user receives]).
  void match() {
    // Receives earlier in this pass that found nothing: a message that arrives while the pass
    // runs is theirs, not a later receive's that could also take it.
    std::vector<const Transfer*> waiting;
    auto earlier_takes = [&](const Transfer& r, int source) {
      for (const Transfer* q : waiting) {
        if (q->tag == r.tag && (q->peer == kAnySource || q->peer == source)) return true;
      }
      return false;
    };
    for (auto it = unmatched_.begin(); it != unmatched_.end();) {
      Transfer& r = **it;
      int source = r.peer;
      int rc = MPI_SUCCESS;
      if (r.peer == kAnySource) {
        source = MPI_ANY_SOURCE;
        bool same_tag = false;
        for (const Transfer* q : waiting) same_tag = same_tag || q->tag == r.tag;
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
        fail(r, rc, "MPI_Improbe");
        finish(r);
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
      r.state = Transfer::State::Posted;
      const int rc2 = MPI_Imrecv(into, count, MPI_BYTE, &message, &r.request);
      if (rc2 != MPI_SUCCESS) {
        fail(r, rc2, "MPI_Imrecv");
        r.request = MPI_REQUEST_NULL;
        finish(r);
      } else {
        posted_.push_back(*it);
      }
      it = unmatched_.erase(it);
    }
  }

  // Tests every posted request (sends and matched receives) once.
  void test_posted() {
    for (size_t i = 0; i < posted_.size();) {
      Transfer& t = *posted_[i];
      int done = 0;
      const int rc = MPI_Test(&t.request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        fail(t, rc, "MPI_Test");
        t.request = MPI_REQUEST_NULL;
        done = 1;
      }
      if (!done) {
        ++i;
        continue;
      }
      finish(t);
      posted_[i] = std::move(posted_.back());
      posted_.pop_back();
    }
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1, max_tag_ = 32767;
  std::mutex mu_;
  std::list<std::shared_ptr<Transfer>> unmatched_;  // guarded by mu_: receives, in posting order
  std::vector<std::shared_ptr<Transfer>> posted_;   // guarded by mu_: requests in MPI's hands
  std::vector<std::shared_ptr<Transfer>> abandoned_;  // guarded by mu_: scratch MPI may write
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

class MpiTransfer : public PeerTransfer {
 public:
  MpiTransfer(std::shared_ptr<MpiPeerChannel> channel, std::shared_ptr<Transfer> t)
      : channel_(std::move(channel)), t_(std::move(t)) {}
  ~MpiTransfer() override { abandon(); }

  bool abandon() override { return channel_->abandon(t_); }
  bool test() override { return channel_->finished(*t_); }
  // Read once finished (the channel writes it under its lock before then).
  int source() const override { return t_->is_send ? channel_->rank() : t_->source; }

 private:
  std::shared_ptr<MpiPeerChannel> channel_;  // its communicator outlives the request
  std::shared_ptr<Transfer> t_;
};

std::unique_ptr<PeerTransfer> MpiPeerChannel::send(const void* buf, size_t bytes, int peer, int tag) {
  check_peer("send", peer, tag, max_tag_);
  const int count = as_count(bytes, "send", peer);
  auto t = std::make_shared<Transfer>();
  t->is_send = true;
  t->buf = const_cast<void*>(buf);
  t->bytes = bytes;
  t->peer = peer;
  t->tag = tag;
  t->state = Transfer::State::Posted;
  check_mpi(MPI_Isend(buf, count, MPI_BYTE, peer, tag, comm_, &t->request),
            "send to rank " + std::to_string(peer) + ": MPI_Isend");
  start(t);
  return std::make_unique<MpiTransfer>(shared_from_this(), std::move(t));
}

std::unique_ptr<PeerTransfer> MpiPeerChannel::recv(void* buf, size_t bytes, int peer, int tag) {
  check_peer("recv", peer, tag, max_tag_);
  as_count(bytes, "recv", peer);
  auto t = std::make_shared<Transfer>();
  t->is_send = false;
  t->buf = buf;
  t->bytes = bytes;
  t->peer = peer;
  t->tag = tag;
  start(t);
  return std::make_unique<MpiTransfer>(shared_from_this(), std::move(t));
}

}  // namespace

std::shared_ptr<PeerChannel> make_mpi_peer_channel(MPI_Comm base) {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) return nullptr;  // the same on every rank
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(base, &comm), "MPI_Comm_dup (point-to-point channel)");
  auto channel = std::make_shared<MpiPeerChannel>(comm);
  PeerChannel::enlist(channel);
  return channel;
}

}  // namespace hvdlite
