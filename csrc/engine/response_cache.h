// Responses remembered by name so a tensor seen before can skip the coordinator: each rank
// then only sets the entry's bit in the negotiation bit vector. Every rank inserts and evicts
// in the same order, so slot ids agree everywhere without being exchanged.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/message.h"

namespace hvdlite {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity) : capacity_(capacity) {}

  static bool cacheable(OpType op) {
    return op == OpType::Allreduce || op == OpType::Broadcast || op == OpType::Reducescatter;
  }
  // Slot holding this name, or -1.
  int find(const std::string& name) const;
  const Response& at(int slot) const { return *slots_[slot]; }
  bool occupied(int slot) const { return slot < static_cast<int>(slots_.size()) && slots_[slot].has_value(); }
  // Number of slots in use or freed (the bit vector covers this many).
  size_t span() const { return slots_.size(); }
  void insert(const Response& response);
  void evict(int slot);

 private:
  size_t capacity_;
  std::vector<std::optional<Response>> slots_;
  std::vector<int> free_;  // freed slots, reused lowest first
  std::unordered_map<std::string, int> by_name_;
};

}  // namespace hvdlite
