// A test-only stand-in for libnccl.so.2 (tests/gpu/standins/build.py builds it; the tests
// point HVDLITE_NCCL_LIBRARY at it). Its communicators are POSIX shared-memory segments named
// by the unique id, so ranks that are separate processes (mpirun) meet there; collectives
// run in stream order on the stand-in CUDA runtime's streams, in chunks through one slot per
// rank, between barriers. Point-to-point (ncclSend / ncclRecv) goes through one ring buffer
// per ordered pair of ranks, without barriers, so a rank only waits for the peers it names.
// ncclGroupStart / ncclGroupEnd: the calls between them are checked at once and queued as one
// stream operation at the end, collectives first (in call order), then every send and
// receive of the group progressed together (so that a rank may send to and receive from the
// same peer, or itself, in one group without deadlock). It checks what real NCCL would refuse (host pointers, two ranks
// claiming one rank number) and fails like it: a barrier that waits longer than
// NCCL_STANDIN_TIMEOUT_S (a lost rank) sets the communicator's asynchronous error, and
// ncclCommAbort makes every collective of the communicator return at once.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kSuccess = 0, kSystemError = 2, kInternalError = 3, kInvalidArgument = 4,
              kRemoteError = 6;
constexpr size_t kSlot = 1 << 20;  // bytes each rank stages per chunk

constexpr size_t kChannel = 64 << 10;  // bytes in flight per ordered pair (send/recv)

struct Header {
  std::atomic<uint64_t> arrived;  // barrier: total arrivals so far
  std::atomic<int> ranks_joined;
  std::atomic<int> claimed[64];
};

// One direction between two ranks: a single-producer single-consumer ring.
struct Channel {
  std::atomic<uint64_t> written, read;
  char data[kChannel];
};

struct Comm {
  std::string name;
  int nranks, rank;
  Header* header;
  char* slots;
  Channel* channels;  // [from * nranks + to]
  size_t bytes;
  uint64_t barriers = 0;  // this rank's barriers so far (stream-ordered: one thread at a time)
  std::atomic<int> async_error{kSuccess};
  std::atomic<bool> aborted{false};
};

std::atomic<int> g_comms{0};
std::atomic<long> g_collectives{0};
std::atomic<int> g_aborts{0};
std::atomic<int> g_last_nranks{0};

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
  enum Kind { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, Send, Recv } kind;
  const char* send;
  char* recv;
  size_t count;  // elements: per rank for AllGather (sent) and ReduceScatter (received)
  int dt, op, root;  // root: the peer for Send / Recv
};

bool live(Comm* c) { return !c->aborted && c->async_error == kSuccess; }

// Every rank puts its chunk into its slot; after a barrier each takes what it needs.
void run_collective(Task* t) {
  Comm* c = t->comm;
  const size_t es = type_size(t->dt), per = kSlot / es;
  char* mine = c->slots + c->rank * kSlot;
  if (t->kind == Task::ReduceScatter) {
    // Segment s of every rank's input is reduced into rank s's output.
    for (int s = 0; s < c->nranks; ++s) {
      for (size_t at = 0; at < t->count && live(c); at += per) {
        const size_t n = std::min(per, t->count - at);
        std::memcpy(mine, t->send + (s * t->count + at) * es, n * es);
        if (!barrier(c)) return;
        if (c->rank == s) reduce_chunk(c, t->recv + at * es, n, t->dt, t->op);
        if (!barrier(c)) return;
      }
    }
    return;
  }
  for (size_t at = 0; at < t->count && live(c); at += per) {
    const size_t n = std::min(per, t->count - at);
    if (t->kind != Task::Broadcast || c->rank == t->root) std::memcpy(mine, t->send + at * es, n * es);
    if (!barrier(c)) return;
    switch (t->kind) {
      case Task::AllReduce: reduce_chunk(c, t->recv + at * es, n, t->dt, t->op); break;
      case Task::Reduce: if (c->rank == t->root) reduce_chunk(c, t->recv + at * es, n, t->dt, t->op); break;
      case Task::Broadcast: std::memcpy(t->recv + at * es, c->slots + t->root * kSlot, n * es); break;
      case Task::AllGather:
        for (int r = 0; r < c->nranks; ++r) {
          std::memcpy(t->recv + (r * t->count + at) * es, c->slots + r * kSlot, n * es);
        }
        break;
      default: break;
    }
    if (!barrier(c)) return;
  }
}

// Moves every send and receive of a group forward until all are done (or the communicator
// fails: a peer that never sends or drains within NCCL_STANDIN_TIMEOUT_S sets the error).
void run_p2p(Comm* c, std::vector<Task*>& ops) {
  std::vector<size_t> done(ops.size(), 0);
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s());
  while (live(c)) {
    bool left = false, moved = false;
    for (size_t i = 0; i < ops.size(); ++i) {
      Task* t = ops[i];
      const size_t bytes = t->count * type_size(t->dt);
      if (done[i] == bytes) continue;
      // One operation per pair and direction at a time, in call order (NCCL's matching).
      bool earlier = false;
      for (size_t j = 0; j < i; ++j) {
        earlier = earlier || (ops[j]->kind == t->kind && ops[j]->root == t->root &&
                              done[j] < ops[j]->count * type_size(ops[j]->dt));
      }
      left = true;
      if (earlier) continue;
      const bool sending = t->kind == Task::Send;
      Channel& ch = c->channels[sending ? c->rank * c->nranks + t->root : t->root * c->nranks + c->rank];
      const uint64_t w = ch.written.load(), r = ch.read.load();
      size_t n = sending ? std::min<size_t>(kChannel - (w - r), bytes - done[i])
                         : std::min<size_t>(w - r, bytes - done[i]);
      const uint64_t pos = sending ? w : r;
      for (size_t k = 0; k < n;) {
        const size_t off = (pos + k) % kChannel, piece = std::min(n - k, kChannel - off);
        if (sending) std::memcpy(ch.data + off, t->send + done[i] + k, piece);
        else std::memcpy(t->recv + done[i] + k, ch.data + off, piece);
        k += piece;
      }
      if (n) {
        (sending ? ch.written : ch.read).fetch_add(n);
        done[i] += n;
        moved = true;
      }
    }
    if (!left) return;
    const auto now = std::chrono::steady_clock::now();
    if (moved) until = now + std::chrono::duration<double>(timeout_s());
    else if (now > until) {
      c->async_error = kRemoteError;
      return;
    }
    else std::this_thread::yield();
  }
}

// What one stream operation runs: one call, or a whole group.
struct Work {
  std::vector<Task*> collectives, p2p;
  ~Work() {
    for (Task* t : collectives) delete t;
    for (Task* t : p2p) delete t;
  }
};

void run_work(void* arg) {
  Work* w = static_cast<Work*>(arg);
  for (Task* t : w->collectives) {
    if (live(t->comm)) run_collective(t);
  }
  if (!w->p2p.empty()) run_p2p(w->p2p[0]->comm, w->p2p);
  delete w;
}

thread_local int t_group_depth = 0;
thread_local Work* t_group = nullptr;
thread_local void* t_group_stream = nullptr;

// NCCL_STANDIN_FAIL_RANK / NCCL_STANDIN_FAIL_AT: that rank's n-th collective fails
// asynchronously (as a broken link would), without reaching its peers.
bool injected_failure(Comm* c) {
  static const int rank = std::getenv("NCCL_STANDIN_FAIL_RANK") ? std::atoi(std::getenv("NCCL_STANDIN_FAIL_RANK")) : -1;
  static const long at = std::getenv("NCCL_STANDIN_FAIL_AT") ? std::atol(std::getenv("NCCL_STANDIN_FAIL_AT")) : -1;
  return c->rank == rank && g_collectives.load() == at;
}

int launch(Task* t, void* stream) {
  if (!cuda().push || !cuda().is_device) return kSystemError;
  const size_t es = type_size(t->dt), n = static_cast<size_t>(t->comm->nranks);
  if (es == 0 || (t->op < 0 || t->op > 4) || ((t->kind == Task::Send || t->kind == Task::Recv) &&
                                               (t->root < 0 || t->root >= t->comm->nranks))) {
    delete t;
    return kInvalidArgument;
  }
  // What each call reads and writes, as NCCL documents it (sendbuff / recvbuff on the root only
  // for Broadcast / Reduce).
  size_t send_bytes = t->count * es, recv_bytes = t->count * es;
  const bool root = t->comm->rank == t->root;
  switch (t->kind) {
    case Task::Broadcast: send_bytes = root ? send_bytes : 0; break;
    case Task::Reduce: recv_bytes = root ? recv_bytes : 0; break;
    case Task::AllGather: recv_bytes *= n; break;
    case Task::ReduceScatter: send_bytes *= n; break;
    case Task::Send: recv_bytes = 0; break;
    case Task::Recv: send_bytes = 0; break;
    default: break;
  }
  if ((send_bytes && !cuda().is_device(t->send, send_bytes)) || (recv_bytes && !cuda().is_device(t->recv, recv_bytes))) {
    std::fprintf(stderr, "nccl stand-in: a buffer of %zu bytes is not device memory\n",
                 send_bytes && !cuda().is_device(t->send, send_bytes) ? send_bytes : recv_bytes);
    delete t;
    return kInvalidArgument;
  }
  if (t_group_depth > 0 && t_group && t_group_stream != stream) {
    std::fprintf(stderr, "nccl stand-in: one group on two streams is not modelled\n");
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
  const bool p2p = t->kind == Task::Send || t->kind == Task::Recv;
  if (t_group_depth > 0) {
    if (!t_group) {
      t_group = new Work();
      t_group_stream = stream;
    }
    (p2p ? t_group->p2p : t_group->collectives).push_back(t);
    return kSuccess;
  }
  Work* w = new Work();
  (p2p ? w->p2p : w->collectives).push_back(t);
  cuda().push(stream, run_work, w);
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
  c->bytes = 4096 + static_cast<size_t>(nranks) * kSlot + static_cast<size_t>(nranks) * nranks * sizeof(Channel);
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
  c->channels = reinterpret_cast<Channel*>(c->slots + static_cast<size_t>(nranks) * kSlot);
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
  g_last_nranks = nranks;
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
  ++g_aborts;
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
int ncclReduce(const void* send, void* recv, size_t count, int dt, int op, int root, void* comm, void* stream) {
  return launch(new Task{static_cast<Comm*>(comm), Task::Reduce, static_cast<const char*>(send),
                         static_cast<char*>(recv), count, dt, op, root}, stream);
}
int ncclAllGather(const void* send, void* recv, size_t count, int dt, void* comm, void* stream) {
  return launch(new Task{static_cast<Comm*>(comm), Task::AllGather, static_cast<const char*>(send),
                         static_cast<char*>(recv), count, dt, 0, 0}, stream);
}
int ncclReduceScatter(const void* send, void* recv, size_t count, int dt, int op, void* comm, void* stream) {
  return launch(new Task{static_cast<Comm*>(comm), Task::ReduceScatter, static_cast<const char*>(send),
                         static_cast<char*>(recv), count, dt, op, 0}, stream);
}
int ncclSend(const void* send, size_t count, int dt, int peer, void* comm, void* stream) {
  return launch(new Task{static_cast<Comm*>(comm), Task::Send, static_cast<const char*>(send),
                         nullptr, count, dt, 0, peer}, stream);
}
int ncclRecv(void* recv, size_t count, int dt, int peer, void* comm, void* stream) {
  return launch(new Task{static_cast<Comm*>(comm), Task::Recv, nullptr, static_cast<char*>(recv),
                         count, dt, 0, peer}, stream);
}
int ncclGroupStart() {
  ++t_group_depth;
  return kSuccess;
}
int ncclGroupEnd() {
  if (t_group_depth == 0) return kInvalidArgument;
  if (--t_group_depth > 0 || !t_group) return kSuccess;
  Work* w = t_group;
  void* stream = t_group_stream;
  t_group = nullptr;
  cuda().push(stream, run_work, w);
  return kSuccess;
}

// Test hooks.
int standin_nccl_comms() { return g_comms.load(); }
int standin_nccl_aborts() { return g_aborts.load(); }
int standin_nccl_last_comm_ranks() { return g_last_nranks.load(); }
long standin_nccl_collectives() { return g_collectives.load(); }

}  // extern "C"
