#include "algorithms/lane_threads.h"

#include <pthread.h>
#include <sched.h>

#include "engine/rank_computing.h"

namespace hvdlite {

LaneThreads::~LaneThreads() { stop(); }

void LaneThreads::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& th : threads_) th.join();
  threads_.clear();
  std::lock_guard<std::mutex> lk(mu_);
  stopping_ = false;
}

void LaneThreads::start(int count, std::function<void(int)> task, std::function<void()> all_done) {
  if (static_cast<int>(threads_.size()) != count) {
    stop();
    uint64_t now;
    {
      std::lock_guard<std::mutex> lk(mu_);
      now = generation_;
    }
    for (int k = 1; k <= count; ++k) {
      threads_.emplace_back([this, k, now] {
        HvdliteThread::mark_for_life();  // Note [computing ranks]
        if (priority_ == Priority::Idle) {
          sched_param param{};
          param.sched_priority = 0;
          pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);  // refused: stays normal
        }
        uint64_t seen = now;
        for (;;) {
          std::function<void(int)> work;
          std::function<void()> all_done;
          {
            std::unique_lock<std::mutex> lk(mu_);
            wake_.wait(lk, [&] { return stopping_ || generation_ != seen; });
            if (stopping_) return;
            seen = generation_;
            work = task_;
            all_done = all_done_;
          }
          work(k);
          if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            if (all_done) all_done();
            settled_.store(true, std::memory_order_release);
          }
        }
      });
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    task_ = std::move(task);
    all_done_ = std::move(all_done);
    settled_.store(count == 0, std::memory_order_relaxed);
    running_.store(count, std::memory_order_release);
    ++generation_;
  }
  wake_.notify_all();
}

void LaneThreads::finish() const {
  while (!settled_.load(std::memory_order_acquire)) std::this_thread::yield();
}

}  // namespace hvdlite
