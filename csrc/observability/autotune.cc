#include "observability/autotune.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "hvdlite.h"

namespace hvdlite {
namespace {

constexpr size_t kMaxPasses = 3;
constexpr int kSamplesPerTrial = 3;               // median of this many windows
constexpr double kMinWindowSeconds = 0.2;         // a window is whole steps lasting at least this
constexpr double kWarmupSeconds = 1.0;            // first steps: caches and buffers warm up
constexpr double kNoStepSeconds = 1.0;            // no step seen this long: end the window anyway
constexpr double kImprovement = 1.03;             // a new best must beat the old by 3%

const char* kSettingNames[Autotune::kWords] = {"fusion_threshold", "cycle_time_ms", "ring_piece_bytes",
                                               "hierarchical_allreduce", "shm_allreduce_min_bytes",
                                               "board_allreduce_max_bytes"};

// The order settings are searched in: the algorithms first (hierarchical or flat, shared
// memory or the ring, what rides in the round), since the best fusion threshold and piece
// size depend on them.
constexpr size_t kSearchOrder[Autotune::kWords] = {3, 4, 5, 0, 1, 2};

uint64_t cycle_ns(double ms) { return static_cast<uint64_t>(ms * 1e6 + 0.5); }

}  // namespace

Autotune::Autotune(Config& config, int rank)
    : config_(config), rank_(rank), enabled_(config.autotune) {
  // Hierarchical all-reduce counts as off until allow_hierarchical() says it is available.
  best_ = proposed_ = applied_ = {config.fusion_threshold, cycle_ns(config.cycle_time_ms),
                                  config.ring_piece_bytes, 0, config.shm_allreduce_min_bytes,
                                  config.board_allreduce_max_bytes};
  if (!enabled_) return;
  candidates_ = {
      {size_t(1) << 20, size_t(4) << 20, size_t(16) << 20, size_t(64) << 20, size_t(128) << 20},
      {cycle_ns(0.05), cycle_ns(0.25), cycle_ns(1.0)},
      {size_t(64) << 10, size_t(256) << 10, size_t(1) << 20, size_t(4) << 20},
      {0},
      {config.shm_allreduce_min_bytes},    // fixed until allow_shared_memory()
      {config.board_allreduce_max_bytes},
  };
  for (size_t s = 0; s < kWords; ++s) {  // the starting value always competes
    auto& c = candidates_[s];
    if (std::find(c.begin(), c.end(), best_[s]) == c.end()) c.insert(c.begin(), best_[s]);
  }
  if (rank_ != 0) return;
  warm_until_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(kWarmupSeconds));
  if (!config.autotune_log.empty()) {
    log_ = std::fopen(config.autotune_log.c_str(), "w");
    if (!log_) {
      throw Error(Status::InvalidArgument, "cannot write HVDLITE_AUTOTUNE_LOG '" +
                  config.autotune_log + "': " + std::strerror(errno));
    }
    std::fprintf(log_, "row,trial,pass,setting,fusion_threshold,cycle_time_ms,ring_piece_bytes,"
                       "hierarchical_allreduce,shm_allreduce_min_bytes,board_allreduce_max_bytes,"
                       "score_bytes_per_s,samples\n");
    std::fflush(log_);
  }
  // The first trial is picked at the first round, once allow_hierarchical() has run.
}

void Autotune::allow_hierarchical(bool available) {
  // The group reads the setting from here on: 0 off, anything else on where available.
  const bool left_to_topology = config_.hierarchical_allreduce == Config::kHierarchicalAuto;
  const uint64_t on = available && config_.hierarchical_allreduce != 0 ? 1 : 0;
  config_.hierarchical_allreduce = static_cast<int>(on);
  best_[3] = proposed_[3] = applied_[3] = on;
  if (!enabled_) return;
  // Both are tried (the default first) only where the user left the choice to hvdlite.
  if (available && left_to_topology) candidates_[3] = {1, 0};
  else candidates_[3] = {on};
}

void Autotune::allow_shared_memory(bool available) {
  if (!enabled_ || !available) return;
  // The starting value first; 0 (the path off) competes, but a path the user turned off stays off.
  if (best_[4] != 0) candidates_[4] = {best_[4], 0};
  if (best_[5] != 0) {
    candidates_[5] = {best_[5], 0, 16384};
    if (best_[5] == 16384) candidates_[5].pop_back();
  }
}

Autotune::~Autotune() {
  if (log_) std::fclose(log_);
}

void Autotune::contribute(uint64_t* words) {
  if (rank_ == 0 && trial_ == 0 && !converged_) next_trial();
  for (size_t i = 0; i < kWords; ++i) words[i] = rank_ == 0 ? proposed_[i] : ~uint64_t(0);
}

void Autotune::apply(const uint64_t* words) {
  Values v;
  std::copy(words, words + kWords, v.begin());
  if (v == applied_) return;
  applied_ = v;
  config_.fusion_threshold = v[0];
  config_.cycle_time_ms = static_cast<double>(v[1]) / 1e6;
  config_.ring_piece_bytes = v[2];
  config_.hierarchical_allreduce = static_cast<int>(v[3]);
  config_.shm_allreduce_min_bytes = v[4];
  config_.board_allreduce_max_bytes = v[5];
  measuring_ = false;  // rank 0: measure from the next step boundary under the new values
  samples_.clear();
}

size_t Autotune::tuned() const { return kSearchOrder[setting_]; }

void Autotune::next_trial() {
  while (true) {
    if (setting_ == kWords) {
      ++pass_;
      if (!changed_in_pass_ || pass_ == kMaxPasses) {
        proposed_ = best_;
        converged_ = true;
        log_row("final", best_, best_score_, 0);
        return;
      }
      changed_in_pass_ = false;
      setting_ = 0;
    }
    if (candidates_[tuned()].size() < 2) {  // fixed: nothing to try
      ++setting_;
      continue;
    }
    proposed_ = best_;
    if (candidate_ < candidates_[tuned()].size()) {  // sweeping this setting's candidates
      proposed_[tuned()] = candidates_[tuned()][candidate_];
      break;
    }
    if (!confirming_) {
      // Sweep done. The incumbent was measured in this same sweep; a challenger that beats
      // it clearly is measured once more against it before it may replace it, so one lucky
      // window cannot move the search.
      double incumbent = 0;
      for (auto& s : scores_) {
        if (s.first == best_[tuned()]) incumbent = s.second;
      }
      auto best = std::max_element(scores_.begin(), scores_.end(),
                                   [](auto& a, auto& b) { return a.second < b.second; });
      if (best->first != best_[tuned()] && best->second > incumbent * kImprovement) {
        confirming_ = true;
        confirm_ = {{{best_[tuned()], incumbent}, {best->first, best->second}}};
        confirmed_ = 0;
        proposed_[tuned()] = confirm_[0].first;
        break;
      }
      best_score_ = incumbent;
    } else if (confirmed_ < confirm_.size()) {
      proposed_[tuned()] = confirm_[confirmed_].first;
      break;
    } else {
      // Both measured twice: the challenger wins on the sum, by the same margin.
      confirming_ = false;
      const bool challenger_won = confirm_[1].second > confirm_[0].second * kImprovement;
      if (challenger_won) {
        best_[tuned()] = confirm_[1].first;
        changed_in_pass_ = true;
      }
      best_score_ = confirm_[challenger_won ? 1 : 0].second / 2;
    }
    scores_.clear();
    candidate_ = 0;
    ++setting_;
  }
  ++trial_;
}

void Autotune::finish_trial(double score) {
  if (confirming_) {
    confirm_[confirmed_++].second += score;
    log_row("confirm", proposed_, score, kSamplesPerTrial);
  } else {
    scores_.emplace_back(proposed_[tuned()], score);
    log_row("trial", proposed_, score, kSamplesPerTrial);
    ++candidate_;
  }
  next_trial();
}

void Autotune::observe(const std::vector<Response>& responses) {
  if (!enabled_ || rank_ != 0 || converged_) return;
  const auto now = Clock::now();
  uint64_t bytes = 0;
  bool step_ended = false;
  for (const Response& r : responses) {
    if (r.op != OpType::Allreduce || !r.ok()) continue;
    bytes += static_cast<uint64_t>(num_elements(r.shape)) * dtype_size(r.dtype);
    if (marker_.empty()) marker_ = r.name;
    step_ended = step_ended || r.name == marker_;
  }
  if (bytes == 0 || now < warm_until_ || applied_ != proposed_) return;
  if (!measuring_) {
    if (step_ended) {  // the first whole step under the trial's values starts here
      measuring_ = true;
      window_start_ = now;
      window_bytes_ = 0;
    }
    return;
  }
  window_bytes_ += bytes;
  const double elapsed = std::chrono::duration<double>(now - window_start_).count();
  if ((step_ended && elapsed >= kMinWindowSeconds) || elapsed >= kNoStepSeconds) {
    samples_.push_back(static_cast<double>(window_bytes_) / elapsed);
    window_start_ = now;
    window_bytes_ = 0;
    if (static_cast<int>(samples_.size()) == kSamplesPerTrial) {
      std::sort(samples_.begin(), samples_.end());
      const double median = samples_[samples_.size() / 2];
      samples_.clear();
      measuring_ = false;
      finish_trial(median);
    }
  }
}

void Autotune::log_row(const char* kind, const Values& v, double score, int samples) {
  if (!log_) return;
  std::fprintf(log_, "%s,%d,%zu,%s,%llu,%.3f,%llu,%llu,%llu,%llu,%.0f,%d\n", kind, trial_,
               pass_ + (converged_ ? 0 : 1), converged_ ? "" : kSettingNames[tuned()],
               static_cast<unsigned long long>(v[0]), static_cast<double>(v[1]) / 1e6,
               static_cast<unsigned long long>(v[2]), static_cast<unsigned long long>(v[3]),
               static_cast<unsigned long long>(v[4]), static_cast<unsigned long long>(v[5]), score,
               samples);
  std::fflush(log_);
}

}  // namespace hvdlite
