#include "transport/peer_channel.h"

#include <sched.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/rank_computing.h"
#include "hvdlite.h"

namespace hvdlite {
namespace {

std::mutex g_channels_mu;
std::vector<std::weak_ptr<PeerChannel>> g_channels;  // guarded by g_channels_mu

}  // namespace

std::atomic<int64_t> PeerChannel::outstanding{0};

void PeerChannel::enlist(const std::shared_ptr<PeerChannel>& channel) {
  std::lock_guard<std::mutex> lk(g_channels_mu);
  // Channels of groups that are gone leave the list here, when the next one joins.
  std::vector<std::weak_ptr<PeerChannel>> live;
  for (auto& c : g_channels) {
    if (!c.expired()) live.push_back(std::move(c));
  }
  live.push_back(channel);
  g_channels = std::move(live);
}

void PeerChannel::progress_all() {
  if (outstanding.load(std::memory_order_relaxed) == 0) return;
  std::vector<std::shared_ptr<PeerChannel>> channels;
  {
    std::lock_guard<std::mutex> lk(g_channels_mu);
    for (const auto& c : g_channels) {
      if (auto live = c.lock()) channels.push_back(std::move(live));
    }
  }
  for (const auto& c : channels) c->progress();
}

bool PeerTransfer::wait_until(std::chrono::steady_clock::time_point until) {
  HvdliteThread::Scope waiting;  // its polling is hvdlite's CPU time (Note [computing ranks])
  // Spin briefly (a reply a few microseconds away), then yield, then sleep a little longer each
  // time, up to half a millisecond: a rank waiting on a slow peer leaves the core to it.
  auto nap = std::chrono::microseconds(20);
  for (uint64_t polls = 0;; ++polls) {
    if (test()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    if (polls < 64) continue;
    if (polls < 256) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(nap);
    if (nap < std::chrono::microseconds(500)) nap *= 2;
  }
}

void PeerChannel::check_peer(const char* what, int peer, int tag, int max_tag) const {
  const std::string group = "a group of " + std::to_string(size()) + " rank(s)";
  const bool any = std::string(what) == "recv" && peer == kAnySource;
  if (!any && (peer < 0 || peer >= size())) {
    throw Error(Status::InvalidArgument, std::string(what) + ": rank " + std::to_string(peer) +
                " is out of range for " + group + " (ranks 0 to " + std::to_string(size() - 1) + ")");
  }
  if (peer == rank()) {
    throw Error(Status::InvalidArgument, std::string(what) + ": rank " + std::to_string(peer) +
                " is this rank itself in " + group + "; point-to-point needs another rank");
  }
  if (tag < 0 || tag > max_tag) {
    throw Error(Status::InvalidArgument, std::string(what) + ": tag " + std::to_string(tag) +
                " is outside 0 to " + std::to_string(max_tag) + " (the transport's tag range)");
  }
}

}  // namespace hvdlite
