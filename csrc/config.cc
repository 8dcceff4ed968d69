#include "config.h"

#include <cstdlib>
#include <string>

#include "hvdlite.h"

namespace hvdlite {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

double env_number(const char* name, double fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end != '\0' || d < 0) {
    throw Error(Status::InvalidArgument, std::string(name) + "='" + v +
                "' is not a non-negative number");
  }
  return d;
}

}  // namespace

Config Config::from_env() {
  Config c;
  c.fusion_threshold = static_cast<size_t>(env_number("HVDLITE_FUSION_THRESHOLD", double(c.fusion_threshold)));
  c.cycle_time_ms = env_number("HVDLITE_CYCLE_TIME", c.cycle_time_ms);
  c.cache_capacity = static_cast<size_t>(env_number("HVDLITE_CACHE_CAPACITY", double(c.cache_capacity)));
  c.ring_piece_bytes = static_cast<size_t>(env_number("HVDLITE_RING_PIECE_BYTES", double(c.ring_piece_bytes)));
  if (c.ring_piece_bytes < 64) c.ring_piece_bytes = 64;
  if (c.ring_piece_bytes > (size_t(1) << 30)) c.ring_piece_bytes = size_t(1) << 30;  // one MPI count each
  c.stall_warning_s = env_number("HVDLITE_STALL_CHECK_TIME_SECONDS", c.stall_warning_s);
  const char* hier = env("HVDLITE_HIERARCHICAL_ALLREDUCE");
  if (!hier) hier = env("HOROVOD_HIERARCHICAL_ALLREDUCE");
  if (hier) {
    const std::string h = hier;
    if (h != "0" && h != "1") {
      throw Error(Status::InvalidArgument, "HVDLITE_HIERARCHICAL_ALLREDUCE='" + h +
                  "' must be 0 or 1 (or unset: hierarchical wherever the topology allows it)");
    }
    c.hierarchical_allreduce = h == "1" ? 1 : 0;
  }
  c.max_transfer_bytes = static_cast<size_t>(
      env_number("HVDLITE_TEST_MAX_TRANSFER_BYTES", double(c.max_transfer_bytes)));
  if (c.max_transfer_bytes < 1 || c.max_transfer_bytes > 2147483647) c.max_transfer_bytes = 2147483647;
  const char* level = env("HVDLITE_LOG_LEVEL");
  c.debug = level && std::string(level) == "debug";
  return c;
}

}  // namespace hvdlite
