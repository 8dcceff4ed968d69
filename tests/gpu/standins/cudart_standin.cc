// A test-only stand-in for libcudart: the same C entry points hvdlite loads, working on host
// memory, for CI machines without a GPU (tests/gpu/standins/build.py builds it; the tests
// point HVDLITE_CUDA_RUNTIME_LIBRARY at it).
//
// It models what hvdlite must get right, and fails loudly when it does not:
//   - "device" memory is host memory the stand-in allocated and remembers; a copy whose kind
//     does not match where its pointers are (a device pointer passed as host, say) fails
//     with cudaErrorInvalidValue and is recorded as a violation;
//   - every stream is a FIFO worker thread, so copies really run later than they are issued,
//     and each copy sleeps CUDA_STANDIN_COPY_DELAY_US (plus CUDA_STANDIN_COPY_US_PER_MIB per
//     MiB) first: a reader that is not ordered after a writer (through an event waited on)
//     sees stale data, and copies on different streams overlap as a GPU's copy engines do;
//   - events know whether anyone waited on them: one recorded and never waited on (by a
//     stream, a synchronize or a successful query) is counted (standin_unwaited_events).
// Test hooks (standin_*) launch fake kernels: fill/copy on a stream after a delay.
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace {

constexpr int kSuccess = 0, kInvalidValue = 1, kInvalidDevice = 101, kNotReady = 600;

std::mutex g_mu;
std::map<uintptr_t, size_t> g_device;  // device allocations: start -> bytes
std::set<uintptr_t> g_pinned;
std::string g_violations;
std::atomic<int> g_unwaited{0};
std::atomic<long> g_copies{0};
std::atomic<long> g_mallocs{0};
thread_local int t_device = 0;

int device_count() {
  const char* n = std::getenv("CUDA_STANDIN_DEVICES");
  return n ? std::atoi(n) : 1;
}

void violation(const std::string& what) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_violations += what + "\n";
}

bool is_device(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lk(g_mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = g_device.upper_bound(a);
  if (it == g_device.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> ops;
  size_t running = 0;
  std::thread worker;
  bool stop = false;

  Stream() {
    worker = std::thread([this] {
      std::unique_lock<std::mutex> lk(mu);
      while (true) {
        cv.wait(lk, [&] { return stop || !ops.empty(); });
        if (ops.empty()) return;
        auto op = std::move(ops.front());
        ops.pop_front();
        ++running;
        lk.unlock();
        op();
        lk.lock();
        --running;
        cv.notify_all();
      }
    });
  }
  ~Stream() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv.notify_all();
    worker.join();
  }
  void push(std::function<void()> op) {
    std::lock_guard<std::mutex> lk(mu);
    ops.push_back(std::move(op));
    cv.notify_all();
  }
  void drain() {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return ops.empty() && running == 0; });
  }
};

// Stream 0 (legacy default) and cudaStreamPerThread (2) are one shared worker each.
Stream* resolve(void* s) {
  static Stream* legacy = new Stream();
  static Stream* per_thread = new Stream();
  if (s == nullptr || s == reinterpret_cast<void*>(1)) return legacy;
  if (s == reinterpret_cast<void*>(2)) return per_thread;
  return static_cast<Stream*>(s);
}

struct Event {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;
  bool waited = true;  // the latest record was waited on (nothing recorded counts as waited)
  void mark_waited() {
    std::lock_guard<std::mutex> lk(mu);
    waited = true;
  }
};

// CUDA_STANDIN_COPY_DELAY_US per copy, plus CUDA_STANDIN_COPY_US_PER_MIB per MiB copied (a
// link's bandwidth: what pipelined copies overlap).
void copy_delay(size_t bytes) {
  static const long us = [] {
    const char* d = std::getenv("CUDA_STANDIN_COPY_DELAY_US");
    return d ? std::atol(d) : 0L;
  }();
  static const double us_per_mib = [] {
    const char* d = std::getenv("CUDA_STANDIN_COPY_US_PER_MIB");
    return d ? std::atof(d) : 0.0;
  }();
  const long total = us + static_cast<long>(us_per_mib * static_cast<double>(bytes) / (1 << 20));
  if (total > 0) std::this_thread::sleep_for(std::chrono::microseconds(total));
}

}  // namespace

extern "C" {

const char* cudaGetErrorString(int e) {
  switch (e) {
    case kSuccess: return "no error (stand-in)";
    case kInvalidValue: return "invalid argument (stand-in)";
    case kInvalidDevice: return "invalid device ordinal (stand-in)";
    case kNotReady: return "device not ready (stand-in)";
    default: return "unknown error (stand-in)";
  }
}
int cudaRuntimeGetVersion(int* v) { *v = 12080; return kSuccess; }
int cudaGetDeviceCount(int* n) { *n = device_count(); return kSuccess; }
int cudaSetDevice(int d) {
  if (d < 0 || d >= device_count()) return kInvalidDevice;
  t_device = d;
  return kSuccess;
}
int cudaGetDevice(int* d) { *d = t_device; return kSuccess; }

int cudaMalloc(void** p, size_t bytes) {
  if (const char* fail = std::getenv("CUDA_STANDIN_FAIL_MALLOC"); fail && *fail == '1') return 2;  // cudaErrorMemoryAllocation
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  ++g_mallocs;
  std::lock_guard<std::mutex> lk(g_mu);
  g_device[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return kSuccess;
}
int cudaFree(void* p) {
  if (!p) return kSuccess;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_device.erase(reinterpret_cast<uintptr_t>(p))) return kInvalidValue;
  }
  std::free(p);
  return kSuccess;
}
int cudaHostAlloc(void** p, size_t bytes, unsigned) {
  *p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  std::lock_guard<std::mutex> lk(g_mu);
  g_pinned.insert(reinterpret_cast<uintptr_t>(*p));
  return kSuccess;
}
int cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }
int cudaFreeHost(void* p) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_pinned.erase(reinterpret_cast<uintptr_t>(p))) return kInvalidValue;
  }
  std::free(p);
  return kSuccess;
}

int cudaMemcpyAsync(void* dst, const void* src, size_t bytes, int kind, void* stream) {
  const bool src_dev = is_device(src, bytes), dst_dev = is_device(dst, bytes);
  const bool want_src_dev = kind == 2 || kind == 3, want_dst_dev = kind == 1 || kind == 3;
  if (kind != 4 && (src_dev != want_src_dev || dst_dev != want_dst_dev)) {
    violation("cudaMemcpyAsync kind " + std::to_string(kind) + ": source is " +
              (src_dev ? "device" : "host") + ", destination is " + (dst_dev ? "device" : "host") +
              " memory (or out of its allocation)");
    return kInvalidValue;
  }
  ++g_copies;
  resolve(stream)->push([=] {
    copy_delay(bytes);
    std::memcpy(dst, src, bytes);
  });
  return kSuccess;
}

int cudaMemsetAsync(void* dst, int value, size_t bytes, void* stream) {
  if (!is_device(dst, bytes)) {
    violation("cudaMemsetAsync: destination is not device memory (or out of its allocation)");
    return kInvalidValue;
  }
  resolve(stream)->push([=] {
    copy_delay(bytes);
    std::memset(dst, value, bytes);
  });
  return kSuccess;
}

int cudaStreamCreateWithFlags(void** s, unsigned) { *s = new Stream(); return kSuccess; }
int cudaStreamCreate(void** s) { return cudaStreamCreateWithFlags(s, 0); }
int cudaStreamDestroy(void* s) { delete static_cast<Stream*>(s); return kSuccess; }
int cudaStreamSynchronize(void* s) { resolve(s)->drain(); return kSuccess; }
int cudaDeviceSynchronize() { resolve(nullptr)->drain(); resolve(reinterpret_cast<void*>(2))->drain(); return kSuccess; }

// An event handle owns a reference to its state; queued stream operations hold their own,
// so destroying an event that a stream still waits on is safe (as in CUDA).
using EventRef = std::shared_ptr<Event>;
EventRef& ref(void* ev) { return *static_cast<EventRef*>(ev); }

int cudaEventCreateWithFlags(void** e, unsigned) { *e = new EventRef(std::make_shared<Event>()); return kSuccess; }
int cudaEventCreate(void** e) { return cudaEventCreateWithFlags(e, 0); }
int cudaEventDestroy(void* ev) {
  {
    EventRef e = ref(ev);
    std::lock_guard<std::mutex> lk(e->mu);
    if (!e->waited) ++g_unwaited;
  }
  delete static_cast<EventRef*>(ev);
  return kSuccess;
}
int cudaEventRecord(void* ev, void* stream) {
  EventRef e = ref(ev);
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lk(e->mu);
    if (!e->waited) ++g_unwaited;  // re-recorded before anyone waited on the last record
    gen = ++e->recorded;
    e->waited = false;
  }
  resolve(stream)->push([e, gen] {
    std::lock_guard<std::mutex> lk(e->mu);
    if (e->completed < gen) e->completed = gen;
    e->cv.notify_all();
  });
  return kSuccess;
}
int cudaEventSynchronize(void* ev) {
  EventRef e = ref(ev);
  std::unique_lock<std::mutex> lk(e->mu);
  const uint64_t target = e->recorded;
  e->cv.wait(lk, [&] { return e->completed >= target; });
  e->waited = true;
  return kSuccess;
}
int cudaEventQuery(void* ev) {
  EventRef e = ref(ev);
  std::lock_guard<std::mutex> lk(e->mu);
  if (e->completed < e->recorded) return kNotReady;
  e->waited = true;
  return kSuccess;
}
int cudaStreamWaitEvent(void* stream, void* ev, unsigned) {
  EventRef e = ref(ev);
  uint64_t target;
  {
    std::lock_guard<std::mutex> lk(e->mu);
    target = e->recorded;
    e->waited = true;
  }
  resolve(stream)->push([e, target] {
    std::unique_lock<std::mutex> lk(e->mu);
    e->cv.wait(lk, [&] { return e->completed >= target; });
  });
  return kSuccess;
}

// ---- test hooks ----------------------------------------------------------------------
// A fake kernel: after `delay_us`, fill `bytes` of device memory at `ptr` with `pattern`
// (`pattern_bytes` long, repeated).
int standin_fill_async(void* ptr, const void* pattern, size_t pattern_bytes, size_t bytes,
                       long delay_us, void* stream) {
  if (!is_device(ptr, bytes)) {
    violation("standin_fill_async: not device memory");
    return kInvalidValue;
  }
  std::string p(static_cast<const char*>(pattern), pattern_bytes);
  resolve(stream)->push([=] {
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    for (size_t at = 0; at < bytes; at += p.size()) {
      std::memcpy(static_cast<char*>(ptr) + at, p.data(), std::min(p.size(), bytes - at));
    }
  });
  return kSuccess;
}
// A fake kernel that reads device memory into host memory (a consumer), without the delay
// copies have.
int standin_read_async(void* dst, const void* src, size_t bytes, void* stream) {
  resolve(stream)->push([=] { std::memcpy(dst, src, bytes); });
  return kSuccess;
}
// For the NCCL stand-in: queue fn(arg) on a stream (its collectives run in stream order), and
// ask whether memory is the stand-in's device memory.
int standin_stream_push(void* stream, void (*fn)(void*), void* arg) {
  resolve(stream)->push([fn, arg] { fn(arg); });
  return kSuccess;
}
int standin_is_device(const void* p, size_t bytes) { return is_device(p, bytes) ? 1 : 0; }
int standin_unwaited_events() { return g_unwaited.load(); }
void standin_reset_counters() {
  g_unwaited = 0;
  g_copies = 0;
  g_mallocs = 0;
  std::lock_guard<std::mutex> lk(g_mu);
  g_violations.clear();
}
long standin_copies() { return g_copies.load(); }
long standin_mallocs() { return g_mallocs.load(); }
// Violations so far, one a line ("" when none): copied into buf.
size_t standin_violations(char* buf, size_t size) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (buf && size) {
    std::strncpy(buf, g_violations.c_str(), size - 1);
    buf[size - 1] = 0;
  }
  return g_violations.size();
}

}  // extern "C"
