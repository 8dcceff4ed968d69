#include "observability/stall_inspector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#include "hvdlite.h"
#include "observability/side_message.h"

namespace hvdlite {
namespace {

enum class Kind : uint8_t {
  Query = 2,    // a stalled rank -> every rank: send me your pending names (seq)
  Pending = 3,  // the answer: (seq, [(name, age)])
  Stop = 4,     // the rank that judged the stall -> every rank: end with this message
};

// "rank 1" / "ranks 0, 2": the global ranks of the group's members at these positions.
std::string ranks_text(const std::vector<int>& members, const Membership& group) {
  std::ostringstream s;
  s << (members.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < members.size(); ++i) s << (i ? ", " : "") << group.global(members[i]);
  return s.str();
}

}  // namespace

StallInspector::StallInspector(Transport& transport, const Config& config,
                               const Membership& members)
    : transport_(transport), config_(config), members_(members) {
  const double check = config.stall_check_s, shutdown = config.stall_shutdown_s;
  threshold_s_ = check > 0 && shutdown > 0 ? std::min(check, shutdown) : std::max(check, shutdown);
  last_evaluation_ = Clock::now() - std::chrono::hours(1);
}

std::chrono::milliseconds StallInspector::poll_interval() const {
  if (!enabled()) return std::chrono::hours(1);  // nothing to do: the idle engine sleeps on
  // A fiftieth of the threshold, at most 200 ms: with the answers' wait the warning comes at
  // most about a second late; never busier than 10 ms.
  const auto ms = static_cast<int64_t>(threshold_s_ * 20);
  return std::chrono::milliseconds(std::clamp<int64_t>(ms, 10, 200));
}

double StallInspector::reply_wait_s() const {
  // Live ranks answer within a poll interval; a frozen one never does.
  return std::clamp(threshold_s_ / 10, 0.05, 1.0);
}

std::vector<StallInspector::Waiting> StallInspector::waiting(const EntryList& pending,
                                                             Clock::time_point now) const {
  std::vector<Waiting> out;
  for (const auto& e : pending) {
    if (e->done || e->request.op == OpType::Join) continue;
    out.push_back({e->request.name, std::chrono::duration<double>(now - e->enqueued).count()});
  }
  return out;
}

void StallInspector::check(const EntryList& pending) {
  if (!enabled()) return;
  const auto now = Clock::now();
  if (now - last_poll_ < poll_interval()) return;
  last_poll_ = now;

  std::vector<Waiting> mine = waiting(pending, now);
  double oldest = 0;
  for (const Waiting& w : mine) oldest = std::max(oldest, w.age_s);
  // Ask again a threshold after the last judgement, or at once when the shutdown time came.
  const double since = std::chrono::duration<double>(now - last_evaluation_).count();
  const bool due = since >= threshold_s_ ||
                   (config_.stall_shutdown_s > 0 && oldest >= config_.stall_shutdown_s &&
                    since >= reply_wait_s());
  if (!query_open_ && oldest >= threshold_s_ && due) {
    query_open_ = true;
    query_sent_ = now;
    ++query_seq_;
    replies_.clear();
    replies_[transport_.rank()] = std::move(mine);
    SideWriter q(static_cast<uint8_t>(Kind::Query));
    q.put(query_seq_);
    for (int r = 0; r < transport_.size(); ++r) {
      if (r != transport_.rank()) transport_.send_side(q.out, r);
    }
  }
  // Judge with every answer in, or without those that did not come in time (frozen ranks).
  if (query_open_ && (static_cast<int>(replies_.size()) == transport_.size() ||
                      std::chrono::duration<double>(now - query_sent_).count() >= reply_wait_s())) {
    evaluate(now);
  }
}

bool StallInspector::owns(const std::vector<uint8_t>& bytes) {
  return !bytes.empty() && bytes[0] >= static_cast<uint8_t>(Kind::Query) &&
         bytes[0] <= static_cast<uint8_t>(Kind::Stop);
}

void StallInspector::on_message(const std::vector<uint8_t>& bytes, int from,
                                const EntryList& pending) {
  if (!owns(bytes)) return;
  const auto now = Clock::now();
  SideReader in{bytes};
  switch (static_cast<Kind>(bytes[0])) {
    case Kind::Query: {
      SideWriter reply(static_cast<uint8_t>(Kind::Pending));
      reply.put(in.get<uint32_t>());
      const std::vector<Waiting> mine = waiting(pending, now);
      reply.put(static_cast<uint32_t>(mine.size()));
      for (const Waiting& w : mine) {
        reply.put(w.name);
        reply.put(w.age_s);
      }
      transport_.send_side(reply.out, from);
      break;
    }
    case Kind::Pending: {
      if (!query_open_ || in.get<uint32_t>() != query_seq_) break;  // an answer to an old query
      std::vector<Waiting> theirs(in.get<uint32_t>());
      for (Waiting& w : theirs) {
        w.name = in.str();
        w.age_s = in.get<double>();
      }
      replies_[from] = std::move(theirs);
      break;
    }
    case Kind::Stop:
      throw Error(Status::ShutDown, in.str());
  }
}

void StallInspector::evaluate(Clock::time_point now) {
  query_open_ = false;
  last_evaluation_ = now;
  struct Tensor {
    std::set<int> ranks;
    double age_s = 0;
  };
  std::map<std::string, Tensor> tensors;
  for (const auto& [rank, list] : replies_) {
    for (const Waiting& w : list) {
      Tensor& t = tensors[w.name];
      t.ranks.insert(rank);
      t.age_s = std::max(t.age_s, w.age_s);
    }
  }
  std::vector<std::pair<std::string, Tensor>> stalled;
  for (auto& [name, t] : tensors) {
    if (t.age_s >= threshold_s_ && static_cast<int>(t.ranks.size()) < transport_.size()) {
      stalled.emplace_back(name, t);
    }
  }
  if (stalled.empty()) return;  // everyone has everything: slow, not stalled
  // The lowest rank that answered and submitted a stalled tensor speaks for all.
  int speaker = transport_.rank();
  for (const auto& st : stalled) speaker = std::min(speaker, *st.second.ranks.begin());
  if (speaker != transport_.rank()) return;
  std::sort(stalled.begin(), stalled.end(),
            [](const auto& a, const auto& b) { return a.second.age_s > b.second.age_s; });
  std::ostringstream msg;
  double oldest = 0;
  for (size_t i = 0; i < stalled.size() && i < 10; ++i) {
    const Tensor& t = stalled[i].second;
    std::vector<int> have(t.ranks.begin(), t.ranks.end()), have_not;
    for (int r = 0; r < transport_.size(); ++r) {
      if (!t.ranks.count(r)) have_not.push_back(r);
    }
    oldest = std::max(oldest, t.age_s);
    msg << (i ? "; " : "") << "'" << stalled[i].first << "' waited " << std::lround(t.age_s)
        << " s: " << ranks_text(have, members_) << " submitted it; " << ranks_text(have_not, members_)
        << (have_not.size() == 1 ? " has not" : " have not");
  }
  if (stalled.size() > 10) msg << "; and " << stalled.size() - 10 << " more";
  std::vector<int> silent;
  for (int r = 0; r < transport_.size(); ++r) {
    if (!replies_.count(r)) silent.push_back(r);
  }
  if (!silent.empty()) {
    msg << " (" << ranks_text(silent, members_) << (silent.size() == 1 ? " does" : " do")
        << " not answer: stopped, or stuck outside hvdlite with the engine blocked)";
  }
  msg << ". A rank that has not submitted a tensor is stuck elsewhere, or its collectives "
         "differ (names, or the order of conditional collectives).";
  if (config_.stall_shutdown_s > 0 && oldest >= config_.stall_shutdown_s) {
    const std::string text = "stalled" + members_.where() +
                             " for more than HVDLITE_STALL_SHUTDOWN_TIME_SECONDS (" +
                             std::to_string(std::lround(config_.stall_shutdown_s)) + " s): " + msg.str();
    SideWriter stop(static_cast<uint8_t>(Kind::Stop));
    stop.put(text);
    for (int r = 0; r < transport_.size(); ++r) {
      if (r != transport_.rank()) transport_.send_side(stop.out, r);
    }
    throw Error(Status::ShutDown, text);
  }
  if (config_.stall_check_s > 0 && oldest >= config_.stall_check_s) {
    std::fprintf(stderr, "[hvdlite rank %d] warning: stall%s: %s\n",
                 members_.global(transport_.rank()), members_.where().c_str(), msg.str().c_str());
  }
}

}  // namespace hvdlite
