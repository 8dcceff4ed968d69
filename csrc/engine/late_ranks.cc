#include "engine/late_ranks.h"

#include <algorithm>

namespace hvdlite {
namespace {

bool bit(const uint64_t* words, size_t i) { return (words[i / 64] >> (i % 64)) & 1; }

}  // namespace

void LateRanks::contribute(uint64_t* extra, const uint64_t* my_ready, size_t slot_words, int rank,
                           size_t rank_words) {
  for (size_t i = 0; i < slot_words; ++i) extra[i] = ~my_ready[i];
  uint64_t* probe = extra + slot_words;
  for (size_t p = 0; p < probes_.size(); ++p) {
    uint64_t* ranks = probe + p * rank_words;
    std::fill(ranks, ranks + rank_words, ~uint64_t(0));
    const size_t s = probes_[p];
    const bool had_it = s / 64 < my_ready_.size() && bit(my_ready_.data(), s);
    if (had_it) ranks[rank / 64] &= ~(uint64_t(1) << (rank % 64));
  }
  my_ready_.assign(my_ready, my_ready + slot_words);
}

std::map<std::string, std::vector<int>> LateRanks::observe(
    const uint64_t* extra, const uint64_t* ready, const uint64_t* valid, size_t span,
    size_t slot_words, int size, size_t rank_words, const ResponseCache& cache,
    const Membership& members, bool tracing) {
  std::map<std::string, std::vector<int>> decided;
  if (active_) {
    const uint64_t* probe = extra + slot_words;
    for (size_t p = 0; p < probes_.size(); ++p) {
      if (!bit(valid, probes_[p])) continue;
      std::vector<int> late;
      for (int r = 0; r < size; ++r) {
        if (bit(probe + p * rank_words, static_cast<size_t>(r))) late.push_back(members.global(r));
      }
      late_[probes_[p]] = std::move(late);
    }
    std::vector<size_t> waiting;
    for (size_t s = 0; s < span; ++s) {
      if (!bit(valid, s)) {
        late_.erase(s);  // evicted: the slot may come back holding another tensor
      } else if (bit(ready, s)) {
        auto it = late_.find(s);
        if (it == late_.end()) continue;
        if (cache.occupied(static_cast<int>(s))) decided[cache.at(static_cast<int>(s)).name] = it->second;
        late_.erase(it);
      } else if (!bit(extra, s)) {
        waiting.push_back(s);  // some rank has it pending, not every rank
      }
    }
    probes_.clear();
    for (size_t s : waiting) {
      if (!std::binary_search(waiting_.begin(), waiting_.end(), s)) probes_.push_back(s);
    }
    waiting_ = std::move(waiting);
  }
  active_ = tracing;
  if (!active_) {
    probes_.clear();
    waiting_.clear();
    late_.clear();
  }
  return decided;
}

}  // namespace hvdlite
