// A test-only stand-in for libnccl.so.2 (tests/gpu/standins/build.py builds it; the tests
// point HVDLITE_NCCL_LIBRARY at it). Its communicators are POSIX shared-memory segments named
// by the unique id, so ranks that are separate processes (mpirun) meet there; collectives
// run in stream order on the stand-in CUDA runtime's streams, in chunks through one slot per
// rank, between barriers. It checks what real NCCL would refuse (host pointers, two ranks
// claiming one rank number) and fails like it: a barrier that waits longer than
// NCCL_STANDIN_TIMEOUT_S (a lost rank) sets the communicator's asynchronous error, and
// ncclCommAbort makes every collective of the communicator return at once.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

constexpr int kSuccess = 0, kSystemError = 2, kInternalError = 3, kInvalidArgument = 4,
              kRemoteError = 6;
constexpr size_t kSlot = 1 << 20;  // bytes each rank stages per chunk

struct Header {
  std::atomic<uint64_t> arrived;  // barrier: total arrivals so far
  std::atomic<int> ranks_joined;
  std::atomic<int> claimed[64];
};

struct Comm {
  std::string name;
  int nranks, rank;
  Header* header;
  char* slots;
  size_t bytes;
  uint64_t barriers = 0;  // this rank's barriers so far (stream-ordered: one thread at a time)
  std::atomic<int> async_error{kSuccess};
  std::atomic<bool> aborted{false};
};

std::atomic<int> g_comms{0};
std::atomic<long> g_collectives{0};

struct CudaHooks {
  int (*push)(void*, void (*)(void*), void*);
  int (*is_device)(const void*, size_t);
};

const CudaHooks& cuda() {
  static CudaHooks hooks = [] {
    CudaHooks h{};
    const char* path = std::getenv("HVDLITE_CUDA_RUNTIME_LIBRARY");
    void* lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (lib) {
      h.push = reinterpret_cast<int (*)(void*, void (*)(void*), void*)>(dlsym(lib, "standin_stream_push"));
      h.is_device = reinterpret_cast<int (*)(const void*, size_t)>(dlsym(lib, "standin_is_device"));
    }
    return h;
  }();
  return hooks;
}

double timeout_s() {
  const char* t = std::getenv("NCCL_STANDIN_TIMEOUT_S");
  return t ? std::atof(t) : 60.0;
}

// False when the communicator was aborted or a peer never came (async error set).
bool barrier(Comm* c) {
  const uint64_t target = (++c->barriers) * static_cast<uint64_t>(c->nranks);
  c->header->arrived.fetch_add(1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s());
  while (c->header->arrived.load() < target) {
    if (c->aborted) return false;
    if (std::chrono::steady_clock::now() > until) {
      c->async_error = kRemoteError;
      return false;
    }
    std::this_thread::yield();
  }
  return true;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) return (sign ? -1.f : 1.f) * std::ldexp(static_cast<float>(man), -24);
  if (exp == 31) return sign ? -INFINITY : INFINITY;
  uint32_t bits = sign | ((exp + 112) << 23) | (man << 13);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t float_to_half(float f) {  // round to nearest even, no subnormal care needed here
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  int exp = static_cast<int>((x >> 23) & 0xff) - 112;
  uint32_t man = x & 0x7fffff;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  uint32_t h = sign | (exp << 10) | (man >> 13);
  const uint32_t rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(h);
}
float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

template <typename T>
T combine(T a, T b, int op) {
  switch (op) {
    case 1: return a * b;
    case 2: return a > b ? a : b;
    case 3: return a < b ? a : b;
    default: return a + b;  // sum; avg divides at the end
  }
}

template <typename T>
void reduce_typed(Comm* c, char* out, size_t offset, size_t count, int op) {
  for (size_t i = 0; i < count; ++i) {
    T acc;
    std::memcpy(&acc, c->slots + offset + i * sizeof(T), sizeof(T));
    for (int r = 1; r < c->nranks; ++r) {
      T v;
      std::memcpy(&v, c->slots + r * kSlot + offset + i * sizeof(T), sizeof(T));
      acc = combine(acc, v, op);
    }
    if (op == 4) acc = static_cast<T>(acc / static_cast<T>(c->nranks));
    std::memcpy(out + i * sizeof(T), &acc, sizeof(T));
  }
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void reduce_16(Comm* c, char* out, size_t count, int op) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t raw;
    std::memcpy(&raw, c->slots + i * 2, 2);
    float acc = Load(raw);
    for (int r = 1; r < c->nranks; ++r) {
      std::memcpy(&raw, c->slots + r * kSlot + i * 2, 2);
      acc = combine(acc, Load(raw), op);
    }
    if (op == 4) acc /= static_cast<float>(c->nranks);
    raw = Store(acc);
    std::memcpy(out + i * 2, &raw, 2);
  }
}

size_t type_size(int dt) {
  switch (dt) {
    case 0: case 1: return 1;
    case 2: case 3: return 4;
    case 4: case 5: return 8;
    case 6: case 9: return 2;
    case 7: return 4;
    case 8: return 8;
    default: return 0;
  }
}

void reduce_chunk(Comm* c, char* out, size_t count, int dt, int op) {
  switch (dt) {
    case 0: reduce_typed<int8_t>(c, out, 0, count, op); break;
    case 1: reduce_typed<uint8_t>(c, out, 0, count, op); break;
    case 2: reduce_typed<int32_t>(c, out, 0, count, op); break;
    case 3: reduce_typed<uint32_t>(c, out, 0, count, op); break;
    case 4: reduce_typed<int64_t>(c, out, 0, count, op); break;
    case 5: reduce_typed<uint64_t>(c, out, 0, count, op); break;
    case 6: reduce_16<half_to_float, float_to_half>(c, out, count, op); break;
    case 7: reduce_typed<float>(c, out, 0, count, op); break;
    case 8: reduce_typed<double>(c, out, 0, count, op); break;
    case 9: reduce_16<bf16_to_float, float_to_bf16>(c, out, count, op); break;
  }
}

struct Task {
  Comm* comm;
  enum Kind { AllReduce, Broadcast } kind;
  const char* send;
  char* recv;
  size_t count;
  int dt, op, root;
};

void run_task(void* arg) {
  Task* t = static_cast<Task*>(arg);
  Comm* c = t->comm;
  const size_t es = type_size(t->dt), per = kSlot / es, total = t->count;
  for (size_t at = 0; at < total && !c->aborted && c->async_error == kSuccess; at += per) {
    const size_t n = std::min(per, total - at);
    if (t->kind == Task::AllReduce || c->rank == t->root) {
      std::memcpy(c->slots + c->rank * kSlot, t->send + at * es, n * es);
    }
    if (!barrier(c)) break;
    if (t->kind == Task::AllReduce) reduce_chunk(c, t->recv + at * es, n, t->dt, t->op);
    else std::memcpy(t->recv + at * es, c->slots + t->root * kSlot, n * es);
    if (!barrier(c)) break;
  }
  delete t;
}

// NCCL_STANDIN_FAIL_RANK / NCCL_STANDIN_FAIL_AT: that rank's n-th collective fails
// asynchronously (as a broken link would), without reaching its peers.
bool injected_failure(Comm* c) {
  static const int rank = std::getenv("NCCL_STANDIN_FAIL_RANK") ? std::atoi(std::getenv("NCCL_STANDIN_FAIL_RANK")) : -1;
  static const long at = std::getenv("NCCL_STANDIN_FAIL_AT") ? std::atol(std::getenv("NCCL_STANDIN_FAIL_AT")) : -1;
  return c->rank == rank && g_collectives.load() == at;
}

int launch(Task* t, void* stream) {
  if (!cuda().push || !cuda().is_device) return kSystemError;
  const size_t bytes = t->count * type_size(t->dt);
  if (type_size(t->dt) == 0 || (t->op < 0 || t->op > 4)) {
    delete t;
    return kInvalidArgument;
  }
  const bool needs_send = t->kind == Task::AllReduce || t->comm->rank == t->root;
  if ((needs_send && !cuda().is_device(t->send, bytes)) || !cuda().is_device(t->recv, bytes)) {
    std::fprintf(stderr, "nccl stand-in: a buffer of %zu bytes is not device memory\n", bytes);
    delete t;
    return kInvalidArgument;
  }
  if (t->comm->aborted) {
    delete t;
    return kInvalidArgument;
  }
  ++g_collectives;
  if (injected_failure(t->comm)) {
    t->comm->async_error = kInternalError;
    delete t;
    return kSuccess;
  }
  cuda().push(stream, run_task, t);
  return kSuccess;
}

}  // namespace

extern "C" {

struct ncclUniqueId { char internal[128]; };

int ncclGetVersion(int* v) { *v = 22809; return kSuccess; }
const char* ncclGetErrorString(int e) {
  switch (e) {
    case kSuccess: return "no error (stand-in)";
    case kSystemError: return "unhandled system error (stand-in)";
    case kInternalError: return "internal error (stand-in)";
    case kInvalidArgument: return "invalid argument (stand-in)";
    case kRemoteError: return "remote process exited or there was a network error (stand-in)";
    default: return "unknown (stand-in)";
  }
}
int ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<int> counter{0};
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "/hvdl-nccl-%d-%d-%lld", static_cast<int>(getpid()),
                counter++, static_cast<long long>(std::chrono::steady_clock::now().time_since_epoch().count()));
  return kSuccess;
}
int ncclCommInitRank(void** out, int nranks, ncclUniqueId id, int rank) {
  if (nranks < 1 || nranks > 64 || rank < 0 || rank >= nranks || id.internal[0] != '/') return kInvalidArgument;
  auto* c = new Comm();
  c->name = std::string(id.internal, strnlen(id.internal, sizeof id.internal));
  c->nranks = nranks;
  c->rank = rank;
  c->bytes = 4096 + static_cast<size_t>(nranks) * kSlot;
  const int fd = shm_open(c->name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(c->bytes)) != 0) {
    delete c;
    return kSystemError;
  }
  void* p = mmap(nullptr, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    delete c;
    return kSystemError;
  }
  c->header = static_cast<Header*>(p);
  c->slots = static_cast<char*>(p) + 4096;
  if (c->header->claimed[rank].exchange(1) != 0) {  // real NCCL: "Duplicate GPU detected"-like refusal
    munmap(p, c->bytes);
    delete c;
    return kInvalidArgument;
  }
  c->header->ranks_joined.fetch_add(1);
  if (!barrier(c)) {  // ncclCommInitRank blocks until every rank has joined
    munmap(p, c->bytes);
    delete c;
    return kRemoteError;
  }
  if (rank == 0) shm_unlink(c->name.c_str());  // everyone has it mapped now
  ++g_comms;
  *out = c;
  return kSuccess;
}
int ncclCommDestroy(void* comm) {
  auto* c = static_cast<Comm*>(comm);
  munmap(c->header, c->bytes);
  delete c;
  return kSuccess;
}
int ncclCommAbort(void* comm) {
  // Collectives still queued see the flag and return; the memory stays (their streams may
  // still run them).
  static_cast<Comm*>(comm)->aborted = true;
  return kSuccess;
}
int ncclCommGetAsyncError(void* comm, int* error) {
  *error = static_cast<Comm*>(comm)->async_error.load();
  return kSuccess;
}
int ncclAllReduce(const void* send, void* recv, size_t count, int dt, int op, void* comm, void* stream) {
  return launch(new Task{static_cast<Comm*>(comm), Task::AllReduce, static_cast<const char*>(send),
                         static_cast<char*>(recv), count, dt, op, 0}, stream);
}
int ncclBroadcast(const void* send, void* recv, size_t count, int dt, int root, void* comm, void* stream) {
  return launch(new Task{static_cast<Comm*>(comm), Task::Broadcast, static_cast<const char*>(send),
                         static_cast<char*>(recv), count, dt, 0, root}, stream);
}
// Entry points hvdlite binds but does not call through this stand-in.
int ncclAllGather(const void*, void*, size_t, int, void*, void*) { return kInvalidArgument; }
int ncclReduceScatter(const void*, void*, size_t, int, int, void*, void*) { return kInvalidArgument; }
int ncclSend(const void*, size_t, int, int, void*, void*) { return kInvalidArgument; }
int ncclRecv(void*, size_t, int, int, void*, void*) { return kInvalidArgument; }
int ncclGroupStart() { return kSuccess; }
int ncclGroupEnd() { return kSuccess; }

// Test hooks.
int standin_nccl_comms() { return g_comms.load(); }
long standin_nccl_collectives() { return g_collectives.load(); }

}  // extern "C"
