// The negotiation protocol: one round decides, identically on every rank, which pending
// requests run now. Each round is one bitwise-AND all-reduce of a small bit vector:
//   word 0     flags (inverted where "any rank" is wanted: AND of "no" = nobody said yes),
//              the deadlock detector's among them (deadlock.h)
//   ready[]    one bit per cached response: this rank has that tensor pending (fast path)
//   valid[]    one bit per cached response: cleared by a rank whose request no longer matches
//   staying[]  one bit per rank: cleared by a rank that is shutting down (or exiting)
//   tuning[]   with HVDLITE_AUTOTUNE only: rank 0's settings (other ranks send all ones)
//   late[]     only while some rank's timeline is on: who came late to cached tensors
//              (late_ranks.h)
// Only when some rank has a request the cache cannot describe do the ranks gather their
// requests to the coordinator (rank 0), which decides and validates and broadcasts responses.
//
// Merged rounds (2 ranks, backends with start_control_swap): the ranks swap their words
// instead of reducing them, and each merges both sides (rank 0's first) alike. When all a
// rank has pending is small cached all-reduces of one kind, their data rides behind its
// words, and the merge reduces it too when both ranks sent the same words and the same kind
// of data: then the round has also done the all-reduce, and one message latency does what
// otherwise takes a round plus an exchange. Otherwise the data is dropped and the round goes
// on as usual. The room for data is agreed one round ahead: each round also carries the
// most either rank wanted to send, which sizes the next round.
//
// Note [solo rounds]
// With one rank there is nobody to agree with: the AND of its words is its words, and its
// small cached all-reduces (packed behind them as in a merged round) are already reduced. A
// round then makes no transport call at all; its data is scaled on the way in and out, as
// every path scales it. A lone process (a script run without a launcher) costs little more
// than its Python call.
//
// Gathered rounds (3 to 8 ranks on one host, backends with start_control_gather, the
// shared board of shm_board.h): the same packets, published to every rank instead of
// swapped; every rank ANDs the control words of all and, when all hold the same decision and
// the same kind of data (up to HVDLITE_BOARD_ALLREDUCE_MAX_BYTES), reduces the data of all
// in the ring's operand order, so a small cached all-reduce costs one board round and its
// bits equal the ring's on every rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "observability/autotune.h"
#include "engine/deadline.h"
#include "engine/cross_set_deadlock.h"
#include "engine/config.h"
#include "engine/deadlock.h"
#include "engine/late_ranks.h"
#include "engine/message.h"
#include "engine/response_cache.h"
#include "observability/stall_inspector.h"
#include "engine/tensor_entry.h"
#include "transport/transport.h"
#include "engine/validate.h"

namespace hvdlite {

struct RoundOutcome {
  std::vector<Response> responses;  // same list, same order on every rank
  // A merged round: these entries' data is already reduced (prescaled, not yet postscaled),
  // back to back in their order at `reduced`; nothing of the round is left to execute. Both
  // point into the controller, valid until its next round begins; null: no merged data.
  const std::vector<TensorEntry*>* prereduced = nullptr;
  const void* reduced = nullptr;
  bool shutdown = false;            // some rank asked to shut down
  std::vector<int> shutdown_ranks;  // which ones (named in the error the others get)
  bool failure = false;             // some of them stop because something failed there (not shutdown())
  bool deadlock = false;            // the members agree: deadlocked (deadlock.h)
};

struct RoundOptions {
  // The thread running the round has nothing else to do meanwhile (a caller waiting for its
  // own request), so it may poll for the peers longer before sleeping (wait_for_round).
  bool patient = false;
  // A thread of this rank is blocked waiting on a pending request (deadlock.h).
  bool blocked = false;
  // This rank stops because something failed here (with shutdown_requested): NCCL's
  // asynchronous error. The others then fail their requests as an error, not a shutdown.
  bool failed = false;
  // Past this, a round whose peers have not all answered is left open (negotiate); null:
  // never. Asked only once the peers are late (deadline.h).
  const Deadline* leave_at = nullptr;
};

class Controller {
 public:
  // config: the group's live settings; autotune may change them between rounds. `members`
  // names the group's ranks in validation errors.
  Controller(Transport& transport, Config& config, const Membership& members);

  // Throws InvalidArgument on every rank unless all ranks use the same settings that
  // shape the protocol (cache capacity, fusion threshold, ring piece size). Collective.
  void check_settings_agree();

  // Before the first round: whether hierarchical all-reduce is available (autotune.h).
  void allow_hierarchical(bool available) { autotune_.allow_hierarchical(available); }
  // Likewise for the shared-memory paths of more than 2 ranks on one host (autotune.h).
  void allow_shared_memory(bool available) { autotune_.allow_shared_memory(available); }

  // Runs one round over this rank's pending entries (updating their negotiation state).
  // Returns nothing when options.leave_at passed before every peer answered: the round stays
  // open, and the next call (by whichever thread holds the group's token) finishes it
  // instead of starting one; `pending` must not change meanwhile.
  std::optional<RoundOutcome> negotiate(EntryList& pending, bool shutdown_requested,
                                        const RoundOptions& options);
  RoundOutcome negotiate(EntryList& pending, bool shutdown_requested, bool patient = false) {
    RoundOptions options;
    options.patient = patient;
    return *negotiate(pending, shutdown_requested, options);
  }
  bool round_open() const { return open_; }
  // How many rounds have ended: the same on every member after each (a round's number).
  int64_t rounds() const { return round_; }

  // After a round that declared a deadlock: every member sends what it waits for and has
  // pending, and gets the error message describing all of them, and whether its own waits
  // fail (Note [the ranks that fell behind] in deadlock.h). Collective.
  struct DeadlockVerdict {
    std::string message;
    bool fail_mine = true;  // this member's waited-for requests fail
    bool everyone = true;   // every member's do
  };
  DeadlockVerdict agree_on_deadlock(const RankWaits& mine);

  // The global set's controller also runs the cross-set deadlock watch (cross_set_deadlock.h).
  // Before the group's thread starts.
  void watch_cross_set_deadlocks(RankActivity& activity, CrossSetDeadlock::Describe describe,
                                 CrossSetDeadlock::Stop stop);

  // The turn of the stall inspector and of the watch, while the engine is idle (they also run
  // inside every round): reads the side channel and hands each message to its owner.
  void check_stalls(const EntryList& pending);
  std::chrono::milliseconds stall_poll_interval() const;

 private:
  void begin_round(EntryList& pending, bool shutdown_requested, bool blocked, bool failed);
  // False when leave_at passed first.
  bool wait_for_round(const EntryList& pending, bool patient, const Deadline* leave_at);
  static constexpr int kLooksBeforeClock = 64;  // about half a microsecond
  RoundOutcome end_round(EntryList& pending);
  // Starts the round's reduction of `words`: swapped for a merge (with this rank's small
  // all-reduces packed behind it, when they fit) where the transport allows it, else an AND.
  void start_round(std::vector<uint64_t>& words, const EntryList& pending, bool eligible);
  // After the round: copies the control words back; true when the data was reduced too.
  bool finish_round(std::vector<uint64_t>& words);
  // The next round's room for data, from this round's packet: the most any rank wanted.
  void agree_room();
  bool finish_gathered_round(std::vector<uint64_t>& words);
  std::vector<Response> ask_coordinator(EntryList& pending);

  Transport& transport_;
  const Config& config_;
  const Membership& members_;
  ResponseCache cache_;
  int64_t round_ = 0;
  std::vector<uint64_t> words_;         // this round's control words (negotiate)
  // The open round's layout (begin_round), kept for the thread that finishes it.
  bool open_ = false;
  size_t span_ = 0, nwords_ = 0, rank_words_ = 0, tuning_words_ = 0;
  bool merged_ = false;                 // this round used start_control_swap
  bool gathered_ = false;               // this round used start_control_gather
  bool solo_ = false;                   // one rank: the round needs no transport
  std::vector<const uint64_t*> gathered_packets_;
  size_t room_words_ = 0;               // agreed room for data in this round's packet
  std::vector<uint64_t> packet_;        // header, control words, data
  std::vector<uint64_t> peer_packet_;   // the peer's, then the merge
  std::vector<TensorEntry*> packed_;    // whose data is in packet_, in slot order
  std::vector<uint8_t> merge_scratch_[2];  // the merges' working space, reused each round
  StallInspector stall_;
  Autotune autotune_;
  LateRanks late_;
  DeadlockDetector deadlock_;
  std::unique_ptr<CrossSetDeadlock> cross_set_;  // the global set's only
  std::chrono::steady_clock::time_point last_side_poll_;
};

}  // namespace hvdlite
