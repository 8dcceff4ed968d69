// Note [recycled map nodes]
// A lone small all-reduce costs about a microsecond and a half in all, and each request
// inserts into two hash maps (its handle, HandleTable; its name while in flight, Group) and
// erases from both: four heap calls. RecycledNodes keeps the nodes its map erased (up to
// kKeep) and refills them on insert, so a steady stream of requests allocates none there.
// Not thread-safe: guard it with the map's own lock.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace hvdlite {

template <class Map, size_t kKeep = 16>
class RecycledNodes {
 public:
  // map.emplace(key, value) for a key not in `map`, into a recycled node when there is one.
  template <class Key, class Value>
  void insert(Map& map, Key&& key, Value&& value) {
    if (spare_.empty()) {
      map.emplace(std::forward<Key>(key), std::forward<Value>(value));
      return;
    }
    typename Map::node_type node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = std::forward<Key>(key);
    node.mapped() = std::forward<Value>(value);
    auto result = map.insert(std::move(node));
    if (!result.inserted) spare_.push_back(std::move(result.node));  // the key was there
  }

  // map.erase(it), keeping the node for a later insert.
  void erase(Map& map, typename Map::iterator it) {
    if (spare_.size() < kKeep) {
      spare_.push_back(map.extract(it));
    } else {
      map.erase(it);
    }
  }

 private:
  std::vector<typename Map::node_type> spare_;
};

}  // namespace hvdlite
