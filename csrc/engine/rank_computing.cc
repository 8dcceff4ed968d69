#include "engine/rank_computing.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

namespace hvdlite {
namespace {

int64_t cpu_ns(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return -1;
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct ThreadClock;

// Every thread that has entered a Scope, and the hvdlite time of those that ended since the
// last sample. Never destroyed: threads may end after static destructors ran.
struct Registry {
  std::mutex mu;
  std::vector<ThreadClock*> threads;  // guarded by mu
  int64_t ended_ns = 0;               // guarded by mu
  // rank_computing()'s last sample, guarded by mu too
  bool sampled = false;
  bool computing = false;
  std::chrono::steady_clock::time_point at;
  int64_t process_ns = 0;
};

Registry* g_registry = nullptr;
void forget_in_forked_child();

Registry& registry() {
  static const bool made = [] {
    g_registry = new Registry;
    pthread_atfork(nullptr, nullptr, forget_in_forked_child);
    return true;
  }();
  (void)made;
  return *g_registry;
}

// One thread's CPU clock and Scope depth; enlisted at its first Scope, delisted when it ends.
struct ThreadClock {
  std::atomic<int> depth{0};
  bool enlisted = false;  // the rest guarded by the registry's lock
  clockid_t clock{};
  int64_t last_ns = 0;    // its CPU time at the last sample (or when enlisted)
  bool was_in = false;    // in a Scope at the last sample

  void enlist() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    if (pthread_getcpuclockid(pthread_self(), &clock) != 0) clock = CLOCK_THREAD_CPUTIME_ID;
    last_ns = cpu_ns(CLOCK_THREAD_CPUTIME_ID);  // earlier time was the thread's own
    r.threads.push_back(this);
    enlisted = true;
  }

  ~ThreadClock() {
    if (!enlisted) return;
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    if (depth.load() > 0 || was_in) r.ended_ns += std::max<int64_t>(0, cpu_ns(CLOCK_THREAD_CPUTIME_ID) - last_ns);
    r.threads.erase(std::find(r.threads.begin(), r.threads.end(), this));
  }
};

thread_local ThreadClock t_clock;

// A forked child has only the forking thread, and the lock may have been held by another: a
// fresh list (the parent's is left behind).
void forget_in_forked_child() {
  g_registry = new Registry;
  t_clock.enlisted = false;
  t_clock.depth.store(0);
}

// hvdlite's CPU time since the last call, over every thread (the lock held).
int64_t hvdlite_ns_since_last(Registry& r) {
  int64_t total = r.ended_ns;
  r.ended_ns = 0;
  for (ThreadClock* t : r.threads) {
    const int64_t now = cpu_ns(t->clock);
    if (now < 0) continue;
    const bool in = t->depth.load() > 0;
    if (in || t->was_in) total += std::max<int64_t>(0, now - t->last_ns);
    t->last_ns = now;
    t->was_in = in;
  }
  return total;
}

}  // namespace

// Only the thread itself writes its depth (the sampler only reads it), so a plain load and
// store do, without a locked read-modify-write: a Scope wraps every wait, a few microseconds.
void* HvdliteThread::enter() {
  ThreadClock& t = t_clock;
  const int depth = t.depth.load(std::memory_order_relaxed);
  t.depth.store(depth + 1, std::memory_order_relaxed);
  if (depth == 0 && !t.enlisted) t.enlist();
  return &t;
}

void HvdliteThread::leave(void* thread) {
  ThreadClock& t = *static_cast<ThreadClock*>(thread);
  t.depth.store(t.depth.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

bool rank_computing(double grace_s) {
  using clock = std::chrono::steady_clock;
  const auto window = std::chrono::duration<double>(std::clamp(grace_s / 4, 0.05, 1.0));
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  const auto now = clock::now();
  if (r.sampled && now - r.at < window) return r.computing;
  const int64_t process_ns = cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
  const int64_t hvdlite_ns = hvdlite_ns_since_last(r);
  if (r.sampled) {
    const double wall_ns = std::chrono::duration<double, std::nano>(now - r.at).count();
    const int64_t outside_ns = process_ns - r.process_ns - hvdlite_ns;
    r.computing = static_cast<double>(outside_ns) > kIdleShare * wall_ns;
  }
  r.sampled = true;
  r.at = now;
  r.process_ns = process_ns;
  return r.computing;
}

}  // namespace hvdlite
