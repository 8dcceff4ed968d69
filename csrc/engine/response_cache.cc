#include "engine/response_cache.h"

#include <algorithm>

namespace hvdlite {

int ResponseCache::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

void ResponseCache::insert(const Response& response) {
  int existing = find(response.name);
  if (existing >= 0) {
    slots_[existing] = response;
    return;
  }
  int slot;
  if (!free_.empty()) {
    auto lowest = std::min_element(free_.begin(), free_.end());
    slot = *lowest;
    free_.erase(lowest);
  } else if (slots_.size() < capacity_) {
    slot = static_cast<int>(slots_.size());
    slots_.emplace_back();
  } else {
    return;  // full: the tensor keeps going through the coordinator
  }
  slots_[slot] = response;
  by_name_[response.name] = slot;
}

void ResponseCache::evict(int slot) {
  if (!occupied(slot)) return;
  by_name_.erase(slots_[slot]->name);
  slots_[slot].reset();
  free_.push_back(slot);
}

}  // namespace hvdlite
