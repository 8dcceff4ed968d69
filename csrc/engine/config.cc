#include "engine/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <string>

#include "hvdlite.h"

namespace hvdlite {
namespace {

// A setting's documentation plus how its text becomes a Config field.
struct Setting {
  SettingInfo info;
  std::function<void(Config&, const std::string& text, const std::string& var)> apply;
};

[[noreturn]] void bad_value(const std::string& var, const std::string& text, const char* expected) {
  throw Error(Status::InvalidArgument,
              "environment variable " + var + "='" + text + "' is not " + expected);
}

// A non-negative finite number up to `max` (NaN, infinity and 1e999 are refused: the engine
// turns these settings into integer durations, where they would be undefined behaviour).
double parse_number(const std::string& var, const std::string& text, double max) {
  char* end = nullptr;
  double d = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(d >= 0 && d <= max)) {
    bad_value(var, text, ("a number from 0 to " + std::to_string(static_cast<long long>(max))).c_str());
  }
  return d;
}
constexpr double kMaxCycleTimeMs = 60000;  // a minute between polls
constexpr double kMaxSeconds = 1e9;        // about 31 years; fits int64 nanoseconds

size_t parse_count(const std::string& var, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) || *end != '\0' || errno) {
    bad_value(var, text, "a non-negative integer");
  }
  return static_cast<size_t>(v);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool parse_bool(const std::string& var, const std::string& text) {
  const std::string t = lower(text);
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  bad_value(var, text, "a boolean (1/0, true/false, yes/no, on/off)");
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = {
      {{"HVDLITE_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", "67108864",
        "bytes of all-reduce data fused into one buffer; 0 disables fusion"},
       [](Config& c, const std::string& t, const std::string& v) { c.fusion_threshold = parse_count(v, t); }},
      {{"HVDLITE_CYCLE_TIME", "HOROVOD_CYCLE_TIME", "0.25",
        "ms; the longest sleep between polls while waiting for other ranks (the engine blocks "
        "when idle, and spins for the first 100 us of a wait; a caller running its own round "
        "then polls, yielding the core, up to 2 ms before sleeping)"},
       [](Config& c, const std::string& t, const std::string& v) { c.cycle_time_ms = parse_number(v, t, kMaxCycleTimeMs); }},
      {{"HVDLITE_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", "1024",
        "responses cached so repeated tensors skip the coordinator; 0 disables"},
       [](Config& c, const std::string& t, const std::string& v) { c.cache_capacity = parse_count(v, t); }},
      {{"HVDLITE_RING_PIECE_BYTES", "", "262144",
        "ring steps are cut into pieces of this many bytes so reduction overlaps transfer "
        "(64 B to 1 GiB: one MPI count each)"},
       [](Config& c, const std::string& t, const std::string& v) {
         c.ring_piece_bytes = std::clamp<size_t>(parse_count(v, t), 64, size_t(1) << 30);
       }},
      {{"HVDLITE_EXCHANGE_MAX_BYTES", "", "65536",
        "at 2 ranks, all-reduce batches up to this many bytes are reduced by swapping whole "
        "buffers (one step) rather than by the ring (two); 0 always uses the ring"},
       [](Config& c, const std::string& t, const std::string& v) { c.exchange_max_bytes = parse_count(v, t); }},
      {{"HVDLITE_SHM_ALLREDUCE_MIN_BYTES", "", "1",
        "when all ranks are on one host, all-reduce batches of at least this many bytes are reduced "
        "through shared memory they all map (each rank reduces its share straight from its peers' "
        "staged copies) rather than by the exchange or the ring; 0 never"},
       [](Config& c, const std::string& t, const std::string& v) { c.shm_allreduce_min_bytes = parse_count(v, t); }},
      {{"HVDLITE_PIPELINE_PIECE_BYTES", "", "4194304",
        "at 2 ranks, all-reduce batches of at least twice this many bytes are reduced in pieces "
        "of this size; for CUDA tensors staged through pinned host memory, the device-to-host "
        "copy of one piece, the host reduction of another and the copy back of a third overlap "
        "(results are bitwise the same); 0 reduces every batch in one piece"},
       [](Config& c, const std::string& t, const std::string& v) { c.pipeline_piece_bytes = parse_count(v, t); }},
      {{"HVDLITE_BOARD_ALLREDUCE_MAX_BYTES", "", "512",
        "when 3 to 8 ranks are on one host, a step's cached all-reduces of one kind totalling "
        "up to this many bytes ride in the negotiation round through shared memory (every rank "
        "reduces them from all ranks' packets, in the ring's order): one round instead of a "
        "round and a data path (at most 16384); 0 never"},
       [](Config& c, const std::string& t, const std::string& v) {
         c.board_allreduce_max_bytes = std::min<size_t>(parse_count(v, t), 16384);
       }},
      {{"HVDLITE_SHM_COLLECTIVES", "", "1",
        "when all ranks are on one host, all-gather, broadcast and reduce-scatter go through "
        "shared memory they all map (each rank's contribution copied out by the others in pieces; "
        "the reduce-scatter in the ring's operand order) rather than MPI's and the ring; 0 never"},
       [](Config& c, const std::string& t, const std::string& v) { c.shm_collectives = parse_bool(v, t); }},
      {{"HVDLITE_SHM_LANES", "", "0",
        "when all ranks are on one host, all-reduces of at least 4 MiB through shared memory run "
        "in this many lanes per rank, each a thread moving its part of every rank's segment "
        "through an area of its own (results bitwise the same); 0 picks half the host's cores "
        "per rank, at most 4, agreed by all ranks; 1 one lane"},
       [](Config& c, const std::string& t, const std::string& v) {
         c.shm_lanes = static_cast<int>(std::min<size_t>(parse_count(v, t), 16));
       }},
      {{"HVDLITE_SHM_IDLE_LANES", "", "0",
        "1: the lanes of large shared-memory all-reduces, all but the engine's own, run at the "
        "scheduler's idle priority (SCHED_IDLE), on cores nothing else wants, so they never take "
        "a core from the framework's threads; HVDLITE_SHM_LANES=0 then picks all the host's cores "
        "per rank (at most 4) instead of half"},
       [](Config& c, const std::string& t, const std::string& v) { c.shm_idle_lanes = parse_bool(v, t); }},
      {{"HVDLITE_SHM_SLEEP_AFTER_US", "", "50",
        "when ranks wait on each other through shared memory, microseconds a wait spins and "
        "yields the core before it sleeps until a peer wakes it (so that a waiting rank leaves "
        "its core to the framework's threads); 0 never sleeps"},
       [](Config& c, const std::string& t, const std::string& v) { c.shm_sleep_after_us = parse_count(v, t); }},
      {{"HVDLITE_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS", "60",
        "warn about a tensor some ranks submitted and others have not, naming both (and ranks "
        "that do not answer, such as a stopped one), after this many seconds; the lowest rank "
        "that submitted it warns; 0 disables"},
       [](Config& c, const std::string& t, const std::string& v) { c.stall_check_s = parse_number(v, t, kMaxSeconds); }},
      {{"HVDLITE_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0",
        "after a stall this long the job ends: every rank's pending and later collectives fail "
        "with the stall message; 0 never"},
       [](Config& c, const std::string& t, const std::string& v) { c.stall_shutdown_s = parse_number(v, t, kMaxSeconds); }},
      {{"HVDLITE_DEADLOCK_TIME_SECONDS", "", "30",
        "when every member of a process set has been blocked waiting this long on requests that "
        "no other member submitted (nothing can ever run), each waited-for request fails on every "
        "rank with HvdliteDeadlockError, naming what each rank waits for; a rank that is "
        "computing never trips it (blocked: a thread waits in hvdlite while the process's threads "
        "outside hvdlite use under 5% of a core's CPU time; a thread that sleeps or waits on I/O "
        "or a lock is not computing). Ranks waiting on each other across process sets, every "
        "rank stuck for twice this time, get it too, and hvdlite stops; 0 disables both"},
       [](Config& c, const std::string& t, const std::string& v) { c.deadlock_s = parse_number(v, t, kMaxSeconds); }},
      {{"HVDLITE_TIMELINE", "HOROVOD_TIMELINE", "",
        "write a Chrome trace (chrome://tracing, Perfetto) of every collective to this file"},
       [](Config& c, const std::string& t, const std::string&) { c.timeline = t; }},
      {{"HVDLITE_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES", "0",
        "mark every negotiation round in the timeline"},
       [](Config& c, const std::string& t, const std::string& v) { c.timeline_mark_cycles = parse_bool(v, t); }},
      {{"HVDLITE_TIMELINE_ALL_RANKS", "", "0",
        "every rank writes its own timeline (FILE becomes FILE's stem + .RANK + extension); "
        "by default only rank 0 writes"},
       [](Config& c, const std::string& t, const std::string& v) { c.timeline_all_ranks = parse_bool(v, t); }},
      {{"HVDLITE_AUTOTUNE", "HOROVOD_AUTOTUNE", "0",
        "tune the fusion threshold, cycle time, ring piece size and (where the topology allows "
        "it and HVDLITE_HIERARCHICAL_ALLREDUCE is unset) hierarchical all-reduce during the "
        "first steps of training, from the throughput the engine measures"},
       [](Config& c, const std::string& t, const std::string& v) { c.autotune = parse_bool(v, t); }},
      {{"HVDLITE_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG", "",
        "CSV file (written by rank 0) of every autotune trial and the final choice"},
       [](Config& c, const std::string& t, const std::string&) { c.autotune_log = t; }},
      {{"HVDLITE_LOG_LEVEL", "HOROVOD_LOG_LEVEL", "warning",
        "trace, debug, info, warning, error or fatal; debug and trace print each collective"},
       [](Config& c, const std::string& t, const std::string& v) {
         const std::string l = lower(t);
         if (l != "trace" && l != "debug" && l != "info" && l != "warning" && l != "error" && l != "fatal") {
           bad_value(v, t, "one of trace, debug, info, warning, error, fatal");
         }
         c.debug = l == "trace" || l == "debug";
       }},
      {{"HVDLITE_ABORT_ON_ERROR", "", "1",
        "an unhandled exception on one rank ends the whole job at once"},
       [](Config& c, const std::string& t, const std::string& v) { c.abort_on_error = parse_bool(v, t); }},
      {{"HVDLITE_DYNAMIC_PROCESS_SETS", "HOROVOD_DYNAMIC_PROCESS_SETS", "0",
        "1 allows add_process_set / remove_process_set after init() (sets given to "
        "init(process_sets=...) need no setting)"},
       [](Config& c, const std::string& t, const std::string& v) { c.dynamic_process_sets = parse_bool(v, t); }},
      {{"HVDLITE_HOROVOD_NAMES", "", "0",
        "1: every Python process started with it serves Horovod's import names from hvdlite "
        "(import horovod.torch as hvd gets hvdlite.torch), ahead of an installed Horovod, so that "
        "a Horovod program runs unchanged; hvdlite-run --horovod sets it (docs/horovod.md)"},
       [](Config& c, const std::string& t, const std::string& v) { c.horovod_names = parse_bool(v, t); }},
      {{"HVDLITE_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE", "",
        "all-reduce within each host, then across hosts, then within each host again; unset: "
        "wherever several hosts hold the same number (more than one) of a set's ranks; 0 never; "
        "1 asks for it"},
       [](Config& c, const std::string& t, const std::string& v) { c.hierarchical_allreduce = parse_bool(v, t) ? 1 : 0; }},
      {{"HVDLITE_HIERARCHICAL_CHUNK_BYTES", "", "8388608",
        "hierarchical all-reduce moves data through its stages in chunks of this many bytes, so "
        "one chunk crosses hosts while the next is reduced within the host"},
       [](Config& c, const std::string& t, const std::string& v) {
         c.hierarchical_chunk_bytes = std::max<size_t>(parse_count(v, t), 1);
       }},
      {{"HVDLITE_GPU_OPERATIONS", "HOROVOD_GPU_OPERATIONS", "",
        "how CUDA tensors are reduced and moved: nccl (on the device; fails where NCCL does "
        "not load) or mpi (staged through pinned host memory into the host algorithms); unset: "
        "NCCL where it loads and the host has a GPU for each of its ranks (NCCL refuses two ranks "
        "on one GPU)"},
       [](Config& c, const std::string& t, const std::string& v) {
         const std::string l = lower(t);
         if (l != "nccl" && l != "mpi") bad_value(v, t, "nccl or mpi");
         c.gpu_operations = l == "nccl" ? Config::GpuOperations::Nccl : Config::GpuOperations::Mpi;
       }},
      {{"HVDLITE_TEST_MAX_TRANSFER_BYTES", "", "2147483647",
        "tests only: the largest byte count one MPI collective call is given (larger transfers "
        "go in pieces; 0 or above 2^31-1 means 2^31-1)"},
       [](Config& c, const std::string& t, const std::string& v) {
         const size_t n = parse_count(v, t);
         c.max_transfer_bytes = n < 1 || n > 2147483647 ? 2147483647 : n;
       }},
  };
  return table;
}

}  // namespace

Config Config::from_env() {
  Config c;
  for (const Setting& s : settings()) {
    // The HVDLITE_* name wins over the HOROVOD_* alias when both are set.
    for (const char* var : {s.info.name, s.info.alias}) {
      const char* v = *var ? std::getenv(var) : nullptr;
      if (v && *v) {
        s.apply(c, v, var);
        break;
      }
    }
  }
  return c;
}

const std::vector<SettingInfo>& settings_table() {
  static const std::vector<SettingInfo> infos = [] {
    std::vector<SettingInfo> out;
    for (const Setting& s : settings()) out.push_back(s.info);
    return out;
  }();
  return infos;
}

}  // namespace hvdlite
