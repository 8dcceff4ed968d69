// Messages on the transport's side channel (Transport::send_side / poll_side): a kind byte,
// then fixed-size fields and length-prefixed strings. The stall inspector and the cross-set
// deadlock watch share the channel of the global set; each owns a range of kinds, and the
// controller hands every message to its owner (Controller::check_stalls).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hvdlite.h"

namespace hvdlite {

struct SideWriter {
  std::vector<uint8_t> out;
  SideWriter() = default;  // a payload that travels inside another message
  explicit SideWriter(uint8_t kind) { out.push_back(kind); }
  template <typename T> void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  void put(const std::string& s) {
    put(static_cast<uint32_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  }
  void put(const std::vector<std::string>& names) {
    put(static_cast<uint32_t>(names.size()));
    for (const std::string& n : names) put(n);
  }
};

struct SideReader {
  const std::vector<uint8_t>& in;
  size_t at = 1;  // after the kind byte (0 for a payload without one)
  template <typename T> T get() {
    T v{};
    if (at + sizeof v > in.size()) malformed();
    std::memcpy(&v, in.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string str() {
    const uint32_t n = get<uint32_t>();
    if (at + n > in.size()) malformed();
    std::string s(reinterpret_cast<const char*>(in.data() + at), n);
    at += n;
    return s;
  }
  std::vector<std::string> names() {
    std::vector<std::string> out(get<uint32_t>());
    for (std::string& n : out) n = str();
    return out;
  }
  [[noreturn]] static void malformed() { throw Error(Status::Internal, "malformed side-channel message"); }
};

}  // namespace hvdlite
