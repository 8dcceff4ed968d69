// The Python module hvdlite._core. Arrays arrive as nb::ndarray (DLPack or buffer protocol),
// so torch, TensorFlow, JAX and numpy all cross without a copy and without the core ever
// seeing a framework type. Every hvdlite::Error becomes the matching hvdlite.exceptions class.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "algorithms/adasum.h"
#include "algorithms/collectives.h"
#include "engine/engine.h"
#include "engine/rank_computing.h"
#include "algorithms/half_convert.h"
#include "device/cuda_runtime.h"
#include "device/device_outputs.h"
#include "device/nccl_collectives.h"
#include "device/nccl_library.h"
#include "device/staging.h"
#include "hvdlite.h"
#include "mpi/library.h"
#include "observability/timeline.h"
#include "transport/peer_channel.h"

namespace nb = nanobind;
using namespace hvdlite;


namespace {

// Where this module's libstdc++ comes from, for --check-build: "shared" and the library's path,
// or "static" when the compiler linked it into the module (kept local by csrc/exports.map,
// Note [one exported symbol] in CMakeLists.txt). std::terminate's address is that of the copy
// the module actually calls.
std::pair<std::string, std::string> libstdcxx_linkage() {
  Dl_info self{}, lib{};
  if (!dladdr(reinterpret_cast<void*>(&libstdcxx_linkage), &self) ||
      !dladdr(reinterpret_cast<void*>(&std::terminate), &lib) || !lib.dli_fname) {
    return {"unknown", ""};
  }
  if (self.dli_fbase == lib.dli_fbase) return {"static", self.dli_fname ? self.dli_fname : ""};
  return {"shared", lib.dli_fname};
}

using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;

// The process's engine. Python's init()/shutdown() create and stop it. Every call holds its
// own reference while it uses the engine, so a shutdown on another thread (which stops the
// engine and drops the global reference) never destroys it under a waiter.
std::shared_ptr<Engine> g_context;
std::mutex g_context_mu;     // guards the g_context pointer
std::mutex g_lifecycle_mu;   // serialises init and shutdown
std::atomic<pid_t> g_owner_pid{0};  // the process that ran init()

// Set in a fork()ed child of a process that ran init() (by on_fork_child, so that every
// collective need not ask the kernel for its pid).
std::atomic<bool> g_forked_child{false};

// A fork()ed child inherits the engine's memory but not its thread or its MPI connection.
bool in_forked_child() { return g_forked_child.load(std::memory_order_relaxed); }

// Runs in the child right after fork(). The inherited engine must never be destroyed there
// (its destructor would join a thread that does not exist), so the child keeps a reference
// it never drops. The child never changes g_context after this, so it reads it unlocked.
void on_fork_child() {
  if (g_owner_pid.load() != 0) g_forked_child = true;
  if (g_context) new std::shared_ptr<Engine>(g_context);
}

std::shared_ptr<Engine> current_context() {
  if (in_forked_child()) return g_context;
  std::lock_guard<std::mutex> lk(g_context_mu);
  return g_context;
}

// Whether `eng` is the engine in use. Then, while the caller holds the GIL, dropping another
// reference to it is not the last one: g_context changes only with the GIL held (init,
// shutdown, rebuild, regroup), so the engine cannot be destroyed on the caller's thread.
bool is_current(const std::shared_ptr<Engine>& eng) {
  std::lock_guard<std::mutex> lk(g_context_mu);
  return g_context == eng;
}

// The engine, for collectives. A forked child gets a clear error instead of a hang.
std::shared_ptr<Engine> context_ref() {
  std::shared_ptr<Engine> ctx = current_context();
  if (!ctx) {
    throw Error(Status::NotInitialized,
                "hvdlite has not been initialized; call hvdlite.init() first");
  }
  if (in_forked_child()) {
    throw Error(Status::NotInitialized,
                "hvdlite was initialized in process " + std::to_string(g_owner_pid.load()) +
                " and this is a forked child of it (pid " + std::to_string(getpid()) +
                "): collectives only work in the process that called hvdlite.init() (e.g. not "
                "in DataLoader workers or multiprocessing children)");
  }
  return ctx;
}

// The job's topology, which a forked child may still read.
Topology topology() {
  std::shared_ptr<Engine> ctx = current_context();
  if (!ctx) {
    throw Error(Status::NotInitialized,
                "hvdlite has not been initialized; call hvdlite.init() first");
  }
  return ctx->topology();
}

// Every dtype the core supports: its DLPack description and its name. Written once; the
// conversions, the error messages and _core.supported_dtypes() read it.
struct DtypeInfo {
  DataType dtype;
  nb::dlpack::dtype_code code;
  uint8_t bits;
  const char* name;
};
constexpr DtypeInfo kDtypes[] = {
    {DataType::UInt8, nb::dlpack::dtype_code::UInt, 8, "uint8"},
    {DataType::Int8, nb::dlpack::dtype_code::Int, 8, "int8"},
    {DataType::UInt16, nb::dlpack::dtype_code::UInt, 16, "uint16"},
    {DataType::Int16, nb::dlpack::dtype_code::Int, 16, "int16"},
    {DataType::Int32, nb::dlpack::dtype_code::Int, 32, "int32"},
    {DataType::Int64, nb::dlpack::dtype_code::Int, 64, "int64"},
    {DataType::Float16, nb::dlpack::dtype_code::Float, 16, "float16"},
    {DataType::BFloat16, nb::dlpack::dtype_code::Bfloat, 16, "bfloat16"},
    {DataType::Float32, nb::dlpack::dtype_code::Float, 32, "float32"},
    {DataType::Float64, nb::dlpack::dtype_code::Float, 64, "float64"},
    {DataType::Bool, nb::dlpack::dtype_code::Bool, 8, "bool"},
};

std::string supported_dtype_list() {
  std::string s;
  for (size_t i = 0; i < std::size(kDtypes); ++i) {
    s += (i == 0 ? "" : i + 1 == std::size(kDtypes) ? " and " : ", ");
    s += kDtypes[i].name;
  }
  return s;
}

DataType to_dtype(const nb::dlpack::dtype& dt, const std::string& name) {
  for (const DtypeInfo& d : kDtypes) {
    if (dt.lanes == 1 && dt.code == static_cast<uint8_t>(d.code) && dt.bits == d.bits) return d.dtype;
  }
  static const char* codes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  std::string kind = dt.code < 7 ? codes[dt.code] : "code" + std::to_string(dt.code);
  throw Error(Status::InvalidArgument,
              "tensor '" + name + "' has unsupported dtype " + kind + std::to_string(dt.bits) +
              "; hvdlite supports " + supported_dtype_list());
}

nb::dlpack::dtype to_dlpack(DataType dt) {
  // numpy has no bfloat16: its outputs travel as the uint16 bits (wait() says so).
  if (dt == DataType::BFloat16) return nb::dtype<uint16_t>();
  for (const DtypeInfo& d : kDtypes) {
    if (d.dtype == dt) return {static_cast<uint8_t>(d.code), d.bits, 1};
  }
  return nb::dtype<uint8_t>();
}

template <typename Array>
std::vector<int64_t> shape_of(const Array& a) {
  std::vector<int64_t> s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = static_cast<int64_t>(a.shape(i));
  return s;
}

// DLPack device types (dlpack.h): host memory the core reads directly, and CUDA memory that
// is staged (device/staging.h).
constexpr int kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3;
constexpr int kUnsupportedDevice = -2;

// The CUDA device of an array, -1 for memory the host can read, kUnsupportedDevice otherwise.
template <typename Array>
int cuda_device_of(const Array& a) {
  const int type = a.device_type();
  if (type == kDLCPU || type == kDLCUDAHost) return -1;
  if (type == kDLCUDA) return a.device_id();
  return kUnsupportedDevice;
}

// Checks that an array can be read/written in place by the core and describes it.
template <typename Array>
void describe(const Array& a, const std::string& name, const char* role, Request& req,
              bool bfloat16_bits = false) {
  if (cuda_device_of(a) == kUnsupportedDevice) {
    throw Error(Status::InvalidArgument,
                "tensor '" + name + "' (" + role + ") is on DLPack device type " +
                std::to_string(a.device_type()) + "; hvdlite takes host memory (CPU, CUDA "
                "pinned) and CUDA device memory");
  }
  req.dtype = bfloat16_bits ? DataType::BFloat16 : to_dtype(a.dtype(), name);
  req.shape = shape_of(a);
  // C-contiguous: strides equal the products of the trailing dimensions (size-1 dims free).
  int64_t expected = 1;
  bool empty = false;
  for (size_t i = 0; i < a.ndim(); ++i) empty = empty || a.shape(i) == 0;
  for (size_t i = a.ndim(); !empty && i-- > 0;) {
    if (a.shape(i) != 1 && a.stride_ptr() && a.stride(i) != expected) {
      throw Error(Status::InvalidArgument,
                  "tensor '" + name + "' (" + role + ") is not contiguous (shape " +
                  shape_string(req.shape) + "); pass a C-contiguous array, e.g. "
                  "numpy.ascontiguousarray(x) or x.contiguous()");
    }
    expected *= static_cast<int64_t>(a.shape(i));
  }
}

bool is_ml_dtypes_bfloat16(nb::handle obj) {
  if (!nb::hasattr(obj, "dtype") || !nb::hasattr(obj, "view") || !nb::hasattr(obj, "__array_interface__")) return false;
  nb::object dtype = obj.attr("dtype");
  return nb::hasattr(dtype, "name") && nb::str(dtype.attr("name")).equal(nb::str("bfloat16")) &&
         nb::hasattr(dtype, "itemsize") && nb::cast<int>(dtype.attr("itemsize")) == 2;
}

// Any DLPack / buffer-protocol array -> a view the core can use. numpy arrays of
// ml_dtypes.bfloat16 (which neither protocol can describe) are read as their uint16 bits.
template <typename Array>
bool try_import(nb::handle obj, Array& out) {
  try {
    if (nb::try_cast<Array>(obj, out)) return true;
  } catch (const std::exception&) {
    // nanobind cannot describe some numpy dtypes (e.g. strings) and throws
  }
  PyErr_Clear();  // a failed import may leave a Python error behind
  return false;
}

// Any DLPack / buffer-protocol array -> a view the core can use. numpy arrays of
// ml_dtypes.bfloat16 (which neither protocol can describe) are read as their uint16 bits.
template <typename Array>
Array to_array(nb::handle obj, const std::string& name, const char* role, Request& req) {
  Array a;
  bool bf16 = false;
  if (!try_import(obj, a)) {  // the common case costs one import; bfloat16 is checked after
    bf16 = is_ml_dtypes_bfloat16(obj);
    if (!bf16 || !try_import(obj.attr("view")("uint16"), a)) {
      InArray readable;
      if (std::is_same_v<Array, OutArray> && try_import(obj, readable)) {
        throw Error(Status::InvalidArgument,
                    "tensor '" + name + "' (" + role + ") is read-only (e.g. a numpy array with "
                    "flags.writeable False, or a view of one); the output must be writable: pass "
                    "a writable array, e.g. a copy");
      }
      std::string type = nb::str(obj.type().attr("__name__")).c_str();
      std::string dtype = "?";
      if (nb::hasattr(obj, "dtype")) dtype = nb::steal<nb::str>(PyObject_Str(obj.attr("dtype").ptr())).c_str();
      throw Error(Status::InvalidArgument,
                  "tensor '" + name + "' (" + role + "): cannot use a " + type + " with dtype " + dtype +
                  (std::string(role) == "output" ? " as a writable array" : "") +
                  "; pass a numpy array or a tensor supporting DLPack with one of the dtypes " +
                  supported_dtype_list());
    }
  }
  describe(a, name, role, req, bf16);
  return a;
}

std::unique_ptr<TensorEntry> make_entry(const std::string& name, OpType op, nb::handle input) {
  auto e = std::make_unique<TensorEntry>();
  e->request.name = name;
  e->request.op = op;
  InArray a = to_array<InArray>(input, name, "input", e->request);
  e->input = a.data();
  e->output = const_cast<void*>(e->input);
  e->input_device = e->output_device = cuda_device_of(a);
  return e;
}

void attach_output(TensorEntry& e, nb::handle output);

// In place: one import, as a writable array (saves a second DLPack export per tensor). What
// that cannot import takes the general path, which names what is wrong with it.
std::unique_ptr<TensorEntry> make_entry_in_place(const std::string& name, OpType op, nb::handle tensor) {
  OutArray a;
  if (!try_import(tensor, a)) {
    auto e = make_entry(name, op, tensor);
    attach_output(*e, tensor);
    return e;
  }
  auto e = std::make_unique<TensorEntry>();
  e->request.name = name;
  e->request.op = op;
  describe(a, name, "input", e->request);
  e->input = e->output = a.data();
  e->input_device = e->output_device = cuda_device_of(a);
  return e;
}

void attach_output(TensorEntry& e, nb::handle output) {
  Request out_req;
  OutArray out = to_array<OutArray>(output, e.request.name, "output", out_req);
  if (out_req.dtype != e.request.dtype || out_req.shape != e.request.shape) {
    throw Error(Status::InvalidArgument,
                "tensor '" + e.request.name + "': output is " + dtype_name(out_req.dtype) +
                shape_string(out_req.shape) + " but input is " + dtype_name(e.request.dtype) +
                shape_string(e.request.shape) + "; they must match");
  }
  e.output = out.data();
  e.output_device = cuda_device_of(out);
  if (e.output_device != e.input_device) {
    auto where = [](int d) { return d < 0 ? std::string("host memory") : "CUDA device " + std::to_string(d); };
    throw Error(Status::InvalidArgument,
                "tensor '" + e.request.name + "': input is in " + where(e.input_device) +
                " but output is in " + where(e.output_device) + "; they must be on the same device");
  }
}

// A host output for an all-gather or reduce-scatter, of the input's dtype; the result lands
// there when its size is the result's (Note [outputs the caller gives] in
// algorithms/collectives.cc).
void attach_result_output(TensorEntry& e, nb::handle output) {
  Request out_req;
  OutArray out = to_array<OutArray>(output, e.request.name, "output", out_req);
  if (out_req.dtype != e.request.dtype) {
    throw Error(Status::InvalidArgument,
                "tensor '" + e.request.name + "': output is " + dtype_name(out_req.dtype) +
                " but input is " + dtype_name(e.request.dtype) + "; they must match");
  }
  if (cuda_device_of(out) >= 0 || e.input_device >= 0) {
    throw Error(Status::InvalidArgument,
                "tensor '" + e.request.name + "': an output to write into is taken for host "
                "tensors only (a CUDA result comes from the device's pool)");
  }
  e.output = out.data();
  e.output_given = true;
  e.output_bytes = static_cast<size_t>(num_elements(out_req.shape)) * dtype_size(out_req.dtype);
}

// The grouped forms' optional outputs: one per input, or none.
void attach_result_outputs(EntryList& entries, const std::optional<std::vector<nb::object>>& outputs,
                           const char* op) {
  if (!outputs) return;
  if (outputs->size() != entries.size()) {
    throw Error(Status::InvalidArgument, "grouped " + std::string(op) + " got " +
                std::to_string(entries.size()) + " tensors but " +
                std::to_string(outputs->size()) + " outputs");
  }
  for (size_t i = 0; i < entries.size(); ++i) attach_result_output(*entries[i], (*outputs)[i]);
}

void check_reduction(const Request& r, int op_code, double prescale, double postscale) {
  const bool adasum = op_code == static_cast<int>(ReduceOp::Adasum);
  if (adasum && r.op != OpType::Allreduce) {
    throw Error(Status::InvalidArgument, std::string(op_name(r.op)) + " of tensor '" + r.name +
                "': Adasum is an all-reduce only (use Average, Sum, Min, Max or Product)");
  }
  if (op_code < 0 || op_code > 5) {
    throw Error(Status::InvalidArgument, "tensor '" + r.name + "': unsupported reduce op code " +
                std::to_string(op_code) + " (use Average, Sum, Adasum, Min, Max or Product)");
  }
  if (adasum && !adasum_supports(r.dtype)) {
    throw Error(Status::InvalidArgument, "tensor '" + r.name + "' is " + dtype_name(r.dtype) +
                ": Adasum reduces float16, bfloat16, float32 and float64 tensors only");
  }
  if (r.dtype == DataType::Bool && (op_code == 0 || prescale != 1.0 || postscale != 1.0)) {
    throw Error(Status::InvalidArgument, "tensor '" + r.name + "' is bool: Average and scale "
                "factors are not defined for it (Sum/Max act as logical or, Min/Product as and)");
  }
}

// ---------------------------------------------------------------------------------------
// CUDA tensors (Note [device staging] in device/staging.h)

using Stream = std::optional<uintptr_t>;  // the caller's CUDA stream; None: the default stream

// Submissions with CUDA tensors, by handle, until wait() hands their results to a stream.
std::mutex g_staging_mu;
std::unordered_map<int64_t, std::shared_ptr<device::DeviceResults>> g_staging;

// The ops whose result lands in the caller's output (the others return a core-allocated
// host array).
bool writes_caller_output(OpType op) { return op == OpType::Allreduce || op == OpType::Broadcast; }

// Whether this rank sends CUDA tensors through NCCL (HVDLITE_GPU_OPERATIONS). Unset: when NCCL
// loads and this host has a GPU for each of its ranks (NCCL refuses two ranks on one GPU),
// alike on every rank of a host.
bool use_nccl(const Engine& eng, const std::string& subject) {
  const Config::GpuOperations ops = eng.config().gpu_operations;
  if (ops == Config::GpuOperations::Mpi) return false;
  const bool loaded = device::nccl() != nullptr;
  if (ops == Config::GpuOperations::Nccl) {
    if (!loaded) {
      throw Error(Status::InvalidArgument, subject + " is a CUDA tensor and HVDLITE_GPU_OPERATIONS=nccl, but " +
                  device::nccl_library_info().error);
    }
    return true;
  }
  int devices = 0;
  const device::CudaRuntime* cuda = device::cuda_runtime();
  if (!loaded || !cuda || cuda->GetDeviceCount(&devices) != device::kSuccess) return false;
  return eng.topology().local_size <= devices;
}

// Prepares the submission's CUDA entries: those NCCL carries keep their device pointers (and
// hvdlite's stream waits for the caller's); the others are staged in pinned host memory
// (asynchronously, after the work queued on `stream`). Returns each entry's device side
// (null for host entries), or none at all when no entry is on a device.
// device_output: the caller takes core-allocated outputs (allgather, alltoall, reducescatter)
// on the device (a DLPack CUDA array from wait()); without it those ops are staged and their
// outputs are numpy arrays, as every adapter that predates NCCL expects.
std::vector<std::shared_ptr<device::DeviceResults>> prepare_device(const Engine& eng, EntryList& entries,
                                                                   Stream stream, bool device_output = false) {
  // Host tensors, the common case: nothing to allocate (a small call's cost is microseconds).
  if (std::all_of(entries.begin(), entries.end(), [](const auto& e) { return e->input_device < 0; })) return {};
  std::vector<std::shared_ptr<device::DeviceResults>> sides(entries.size());
  std::vector<size_t> on_device;
  for (size_t i = 0; i < entries.size(); ++i) {
    TensorEntry& e = *entries[i];
    if (e.input_device < 0) continue;
    if (!on_device.empty() && e.input_device != entries[on_device[0]]->input_device) {
      const TensorEntry& f = *entries[on_device[0]];
      throw Error(Status::InvalidArgument,
                  "tensors '" + f.request.name + "' (CUDA device " + std::to_string(f.input_device) +
                  ") and '" + e.request.name + "' (CUDA device " + std::to_string(e.input_device) +
                  ") are submitted together; one submission's tensors must be on one device");
    }
    on_device.push_back(i);
  }
  if (on_device.empty()) return sides;
  const TensorEntry& first = *entries[on_device[0]];
  const std::string subject = "tensor '" + first.request.name + "'";
  const device::CudaRuntime& cuda = device::require_cuda(subject);
  const bool nccl = use_nccl(eng, subject);
  const auto producer = reinterpret_cast<device::Stream>(stream.value_or(0));
  std::vector<size_t> by_nccl, staged;
  for (size_t i : on_device) {
    const Request& r = entries[i]->request;
    entries[i]->request.nccl = nccl && device::nccl_can_run(r) &&
                               (writes_caller_output(r.op) || device_output);
    (entries[i]->request.nccl ? by_nccl : staged).push_back(i);
  }
  if (!by_nccl.empty()) {
    auto order = std::make_shared<device::DeviceOrder>(cuda, first.input_device, producer, by_nccl.size());
    for (size_t i : by_nccl) {
      entries[i]->device = order;
      sides[i] = order;
    }
  }
  if (!staged.empty()) {
    std::vector<device::DeviceStaging::Tensor> tensors;
    bool all_reductions = true;  // only the all-reduce reads a staging piece by piece
    for (size_t i : staged) {
      TensorEntry& e = *entries[i];
      tensors.push_back({e.input, writes_caller_output(e.request.op) ? e.output : nullptr, e.bytes()});
      all_reductions = all_reductions && e.request.op == OpType::Allreduce;
    }
    const size_t piece = all_reductions ? eng.config().pipeline_piece_bytes : 0;
    auto staging = std::make_shared<device::DeviceStaging>(cuda, first.input_device, producer,
                                                           std::move(tensors), piece);
    for (size_t k = 0; k < staged.size(); ++k) {
      TensorEntry& e = *entries[staged[k]];
      e.input = e.output = staging->host(k);
      e.device = staging;
      sides[staged[k]] = staging;
    }
  }
  return sides;
}

// Enqueues `entries` (their CUDA tensors prepared first) and remembers each one's device
// side under its handle for wait().
// *staged (when given): whether any entry has device staging (Note [device staging]).
std::vector<int64_t> submit(Engine& eng, int process_set, EntryList entries, Stream stream,
                            bool wake = true, bool device_output = false, bool* staged = nullptr) {
  std::vector<std::shared_ptr<device::DeviceResults>> sides = prepare_device(eng, entries, stream, device_output);
  std::vector<int64_t> handles = eng.enqueue(process_set, std::move(entries), wake);
  const bool any = !sides.empty();  // prepare_device returns none for host tensors
  if (staged) *staged = any;
  if (!any) return handles;  // host tensors: no lock to take
  std::lock_guard<std::mutex> lk(g_staging_mu);
  for (size_t i = 0; i < handles.size(); ++i) {
    if (sides[i]) g_staging[handles[i]] = sides[i];
  }
  return handles;
}

std::shared_ptr<device::DeviceResults> take_staging(int64_t handle) {
  std::lock_guard<std::mutex> lk(g_staging_mu);
  auto it = g_staging.find(handle);
  if (it == g_staging.end()) return nullptr;
  auto staging = std::move(it->second);
  g_staging.erase(it);
  return staging;
}

// After a handle completed: `stream` waits for its results on the device (the host does
// not), as after c10d's Work.wait(); with no stream, the host waits. Needs the GIL released.
void hand_results_to(const std::shared_ptr<device::DeviceResults>& staging, Stream stream) {
  if (!staging) return;
  if (stream) staging->consumer_wait(reinterpret_cast<device::Stream>(*stream));
  else staging->host_wait();
}

std::unique_ptr<TensorEntry> allreduce_entry(const std::string& name, nb::handle input,
                                             nb::handle output, int op, double prescale,
                                             double postscale, int compression) {
  if (compression < 0 || compression > 2) throw Error(Status::InvalidArgument, "unknown compression code");
  std::unique_ptr<TensorEntry> e;
  if (input.is(output)) {
    e = make_entry_in_place(name, OpType::Allreduce, input);
  } else {
    e = make_entry(name, OpType::Allreduce, input);
    attach_output(*e, output);
  }
  check_reduction(e->request, op, prescale, postscale);
  e->request.reduce_op = static_cast<ReduceOp>(op);
  e->request.prescale = prescale;
  e->request.postscale = postscale;
  e->request.compression = static_cast<Compression>(compression);
  return e;
}

EntryList allreduce_entries(const std::vector<std::string>& names,
                            const std::vector<nb::object>& inputs,
                            const std::vector<nb::object>& outputs, int op, double prescale,
                            double postscale, int compression) {
  if (names.size() != inputs.size() || outputs.size() != inputs.size()) {
    throw Error(Status::InvalidArgument, "allreduce needs as many names and outputs as inputs");
  }
  EntryList entries;
  for (size_t i = 0; i < inputs.size(); ++i) {
    entries.push_back(allreduce_entry(names[i], inputs[i], outputs[i], op, prescale, postscale, compression));
  }
  return entries;
}

std::vector<int64_t> enqueue_allreduce(const std::vector<std::string>& names,
                                       const std::vector<nb::object>& inputs,
                                       const std::vector<nb::object>& outputs, int op,
                                       double prescale, double postscale, int compression,
                                       int process_set, bool wake, Stream stream) {
  std::shared_ptr<Engine> eng = context_ref();
  return submit(*eng, process_set,
                allreduce_entries(names, inputs, outputs, op, prescale, postscale, compression),
                stream, wake);
}

// Note [interruptible waits]
// A wait never blocks in C++ for more than kSignalCheck at a time: between slices it takes the
// GIL and runs Python's pending signal handlers (Ctrl-C, signal.alarm, pytest-timeout), whose
// exception then leaves the wait. The request stays in flight (a round its caller was running
// goes on in the engine's thread), so the same handle can be waited on again; a wait with a
// timeout raises HvdliteTimeoutError likewise. The rank counts as blocked (for the deadlock
// detector) from its first slice's end to the wait's end, not per slice (Note [a wait's first
// slice]).
constexpr auto kSignalCheck = std::chrono::milliseconds(100);

// The last agreed failure (Outcome::agreed_round) handed to Python per process set, for the
// engine in use (a new engine's rounds count from 0 again). Guarded by the GIL.
struct HandedFailures {
  std::weak_ptr<Engine> engine;
  std::unordered_map<int, int64_t> round;
};
HandedFailures g_handed;

// Note [unnamed names after a failure] (src/hvdlite/policy/names.py): once a wait returns an
// outcome completed after a failure every member of its set agreed on, and Python has not
// been told of that failure yet, the set's unnamed calls are numbered afresh from its round.
// The first such wait on a rank is its failed request's own (whose error follows), or, on a
// member that had no request of that name (a joined rank), the next one to finish. The normal
// path (no failure yet) costs one comparison. GIL held.
void realign_names(const std::shared_ptr<Engine>& eng, const Outcome& o) {
  if (o.agreed_round < 0) return;
  if (g_handed.engine.lock() != eng) {
    g_handed.engine = eng;
    g_handed.round.clear();
  }
  int64_t& handed = g_handed.round.try_emplace(o.agreed_set, -1).first->second;
  if (o.agreed_round <= handed) return;
  handed = o.agreed_round;
  if (o.agreed_set == 0) eng->restart_change_numbering(o.agreed_round);  // add/remove: the core's
  nb::module_::import_("hvdlite.policy.names").attr("restart_numbering")(o.agreed_set, o.agreed_round);
}

// Waits for `handle` with the GIL released but for the checks; timeout_s < 0: no limit.
// Throws nb::python_error for a signal handler's exception, Error(Timeout) at the limit.
//
// Note [a wait's first slice]
// Most waits end within their first slice: a small collective whose peers are microseconds
// away, whose whole cost is a few microseconds. So the first slice is short (kFirstSlice) and
// runs before the rank counts as blocked: registering with the deadlock detector (a mutex and
// a map on each side of the wait, and the computing-rank sample every round then takes) is
// paid only by a wait that outlasts it. The detector's grace is seconds; a wait's age is its
// request's, counted from enqueue (Note [the ranks that fell behind]), so neither moves.
constexpr auto kFirstSlice = std::chrono::milliseconds(1);

Outcome wait_interruptibly(Engine& eng, int64_t handle, double timeout_s) {
  using clock = std::chrono::steady_clock;
  const bool limited = timeout_s >= 0 && std::isfinite(timeout_s);
  const auto start = limited ? clock::now() : clock::time_point();
  const auto deadline =
      limited ? start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s))
              : clock::time_point::max();
  {
    nb::gil_scoped_release release;  // Engine::wait_until's CPU time is hvdlite's
    // Without a timeout the first slice's end is read from the clock only if the first round
    // leaves the request unfinished (deadline.h).
    const Deadline first = limited ? Deadline::at(std::min(deadline, start + kFirstSlice))
                                   : Deadline::after(kFirstSlice);
    if (std::optional<Outcome> o = eng.wait_until(handle, first)) return std::move(*o);
  }
  HvdliteThread::Scope waiting;  // the checks between slices too (Note [computing ranks])
  Engine::Blocked blocked(eng, handle);
  while (true) {
    std::optional<Outcome> o;
    {
      nb::gil_scoped_release release;
      const auto now = clock::now();
      o = eng.wait_until(handle, deadline - now > kSignalCheck ? now + kSignalCheck : deadline);
    }
    if (o) return std::move(*o);
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
    if (clock::now() >= deadline) {
      char text[64];
      std::snprintf(text, sizeof text, "%g", timeout_s);
      throw Error(Status::Timeout,
                  std::string("wait(timeout=") + text + ") ran out of time; the request is still "
                  "in flight (wait for it again, or let it finish in the background)");
    }
  }
}

// Waits for an add/remove request as wait_interruptibly does, meeting its agreed failures.
Outcome wait_for_change(const std::shared_ptr<Engine>& eng, int64_t handle) {
  Outcome o = wait_interruptibly(*eng, handle, -1);
  realign_names(eng, o);
  return o;
}

// Enqueues the entries, then waits for every one, in one call: the calling thread runs the
// rounds (no handoff to the engine's thread) and no handle reaches Python. Raises the first
// entry's error once all have finished; the inputs and outputs stay referenced until then (by
// the caller, whose arguments they are). A signal handler's exception leaves at once: the
// unfinished requests and `arrays()` (a tuple of the inputs and outputs, made only then: one
// per call is a good part of a small call's cost) go to hvdlite.work's dropped Works,
// finished in the background. CUDA results are handed to `stream` (Note [device staging]).
template <class Arrays>
void run_entries(std::shared_ptr<Engine> eng, int process_set, EntryList entries, Stream stream,
                 const Arrays& arrays) {
  bool staged = false;
  std::vector<int64_t> handles = submit(*eng, process_set, std::move(entries), stream, false, false, &staged);
  Outcome first_error;
  for (size_t i = 0; i < handles.size(); ++i) {
    Outcome o;
    try {
      o = wait_interruptibly(*eng, handles[i], -1);
      realign_names(eng, o);
    } catch (nb::python_error&) {
      {
        nb::gil_scoped_release release;
        for (size_t j = 0; j < i; ++j) hand_results_to(take_staging(handles[j]), stream);
      }
      std::vector<int64_t> left(handles.begin() + static_cast<std::ptrdiff_t>(i), handles.end());
      nb::module_::import_("hvdlite.work").attr("adopt")(left, arrays());
      throw;
    }
    if (o.status != Status::Success && first_error.status == Status::Success) first_error = std::move(o);
  }
  if (!staged && is_current(eng)) {
    eng.reset();  // not the last reference (is_current): a host call releases the GIL once
  } else {
    nb::gil_scoped_release release;
    for (int64_t h : handles) hand_results_to(take_staging(h), stream);
    eng.reset();  // may be the last reference if hvdlite was shut down meanwhile
  }
  if (first_error.status != Status::Success) throw Error(first_error.status, first_error.error);
}

// enqueue_allreduce and a wait for every member, in one call (run_entries).
void run_allreduce(const std::vector<std::string>& names, const std::vector<nb::object>& inputs,
                   const std::vector<nb::object>& outputs, int op, double prescale,
                   double postscale, int compression, int process_set, Stream stream) {
  std::shared_ptr<Engine> eng = context_ref();
  run_entries(std::move(eng), process_set,
              allreduce_entries(names, inputs, outputs, op, prescale, postscale, compression),
              stream, [&] { return nb::make_tuple(inputs, outputs); });
}

// run_allreduce of one tensor, without the lists: a lone small all-reduce takes a few
// microseconds in all, and converting three lists is a good part of that.
void run_allreduce_one(const std::string& name, nb::handle input, nb::handle output, int op,
                       double prescale, double postscale, int compression, int process_set,
                       Stream stream) {
  std::shared_ptr<Engine> eng = context_ref();
  EntryList entries;
  entries.push_back(allreduce_entry(name, input, output, op, prescale, postscale, compression));
  run_entries(std::move(eng), process_set, std::move(entries), stream,
              [&] { return nb::make_tuple(input, output); });
}

int64_t enqueue_one(int process_set, std::unique_ptr<TensorEntry> e, Stream stream,
                    bool device_output = false) {
  std::shared_ptr<Engine> eng = context_ref();
  EntryList list;
  list.push_back(std::move(e));
  return submit(*eng, process_set, std::move(list), stream, true, device_output)[0];
}

void check_group(const std::vector<std::string>& names, size_t inputs, const char* op) {
  if (names.size() != inputs) {
    throw Error(Status::InvalidArgument, "grouped " + std::string(op) + " got " +
                std::to_string(inputs) + " tensors but " + std::to_string(names.size()) + " names");
  }
}

int64_t enqueue_broadcast(const std::string& name, nb::handle input, nb::handle output, int root,
                          int process_set, Stream stream) {
  std::shared_ptr<Engine> eng = context_ref();
  auto e = make_entry(name, OpType::Broadcast, input);
  attach_output(*e, output);
  // Roots are global ranks, also within a process set (as in Horovod).
  const std::vector<int> members = eng->process_set(process_set).ranks;
  if (std::find(members.begin(), members.end(), root) == members.end()) {
    throw Error(Status::InvalidArgument, "broadcast of tensor '" + name + "': root rank " +
                std::to_string(root) + (process_set == 0
                    ? " is out of range for " + std::to_string(eng->topology().size) + " ranks"
                    : " is not a member of process set " + std::to_string(process_set)));
  }
  e->request.root = root;
  return enqueue_one(process_set, std::move(e), stream);
}

// Grouped forms enqueue their members together, so the group negotiates in one round.
std::vector<int64_t> enqueue_grouped_allgather(const std::vector<std::string>& names,
                                               const std::vector<nb::object>& inputs,
                                               int process_set, Stream stream, bool device_output,
                                               const std::optional<std::vector<nb::object>>& outputs) {
  std::shared_ptr<Engine> eng = context_ref();
  check_group(names, inputs.size(), "allgather");
  EntryList entries;
  for (size_t i = 0; i < inputs.size(); ++i) entries.push_back(make_entry(names[i], OpType::Allgather, inputs[i]));
  attach_result_outputs(entries, outputs, "allgather");
  return submit(*eng, process_set, std::move(entries), stream, true, device_output);
}

int64_t enqueue_allgather(const std::string& name, nb::handle input, int process_set, Stream stream,
                          bool device_output) {
  context_ref();
  return enqueue_one(process_set, make_entry(name, OpType::Allgather, input), stream, device_output);
}

int64_t enqueue_alltoall(const std::string& name, nb::handle input, std::vector<int64_t> splits,
                         int process_set, Stream stream, bool device_output) {
  const int size = static_cast<int>(context_ref()->process_set(process_set).ranks.size());
  auto e = make_entry(name, OpType::Alltoall, input);
  if (e->request.shape.empty()) {
    throw Error(Status::InvalidArgument, "alltoall of tensor '" + name + "' needs at least one dimension");
  }
  const int64_t rows = e->request.shape[0];
  if (splits.empty()) {
    if (rows % size != 0) {
      throw Error(Status::InvalidArgument, "alltoall of tensor '" + name + "': dimension 0 (" +
                  std::to_string(rows) + ") is not divisible by the number of ranks (" +
                  std::to_string(size) + "); pass splits");
    }
    splits.assign(size, rows / size);
  }
  // Overflow-safe: a sum that wraps around 64 bits must not pass for dimension 0.
  int64_t total = 0;
  bool overflow = false;
  for (int64_t s : splits) {
    if (s < 0) throw Error(Status::InvalidArgument, "alltoall of tensor '" + name + "': negative split");
    overflow = overflow || __builtin_add_overflow(total, s, &total);
  }
  if (static_cast<int>(splits.size()) != size || overflow || total != rows) {
    throw Error(Status::InvalidArgument, "alltoall of tensor '" + name + "': splits must have one "
                "entry per rank (" + std::to_string(size) + ") summing to dimension 0 (" +
                std::to_string(rows) + "), got " + shape_string(splits) +
                (overflow ? " (their sum overflows 64 bits)" : ""));
  }
  e->splits = std::move(splits);
  return enqueue_one(process_set, std::move(e), stream, device_output);
}

std::unique_ptr<TensorEntry> make_reducescatter(const std::string& name, nb::handle input, int op,
                                                double prescale, double postscale) {
  auto e = make_entry(name, OpType::Reducescatter, input);
  if (e->request.shape.empty()) {
    throw Error(Status::InvalidArgument, "reducescatter of tensor '" + name + "' needs at least one dimension");
  }
  check_reduction(e->request, op, prescale, postscale);
  e->request.reduce_op = static_cast<ReduceOp>(op);
  e->request.prescale = prescale;
  e->request.postscale = postscale;
  return e;
}

int64_t enqueue_reducescatter(const std::string& name, nb::handle input, int op,
                              double prescale, double postscale, int process_set, Stream stream,
                              bool device_output) {
  context_ref();
  return enqueue_one(process_set, make_reducescatter(name, input, op, prescale, postscale), stream,
                     device_output);
}

std::vector<int64_t> enqueue_grouped_reducescatter(const std::vector<std::string>& names,
                                                   const std::vector<nb::object>& inputs, int op,
                                                   double prescale, double postscale,
                                                   int process_set, Stream stream,
                                                   bool device_output,
                                                   const std::optional<std::vector<nb::object>>& outputs) {
  std::shared_ptr<Engine> eng = context_ref();
  check_group(names, inputs.size(), "reducescatter");
  EntryList entries;
  for (size_t i = 0; i < inputs.size(); ++i) {
    entries.push_back(make_reducescatter(names[i], inputs[i], op, prescale, postscale));
  }
  attach_result_outputs(entries, outputs, "reducescatter");
  return submit(*eng, process_set, std::move(entries), stream, true, device_output);
}

int64_t enqueue_marker(const std::string& name, OpType op, int process_set) {
  const Stream stream;
  context_ref();
  auto e = std::make_unique<TensorEntry>();
  e->request.name = name;
  e->request.op = op;
  e->request.dtype = DataType::UInt8;
  return enqueue_one(process_set, std::move(e), stream);
}

// A core-allocated output in CUDA memory (NCCL's allgather, alltoall, reducescatter): a
// DLPack producer (torch.from_dlpack and the like take it; each __dlpack__ is a new capsule).
// The caller's stream already waits for it (wait(stream=...)): the stream asked for is moot.
struct DeviceOutput {
  nb::ndarray<> array;
};

// wait() result: (output array or None, output is bfloat16 bits, received splits or None,
// last joined rank or None).
// stream: the CUDA stream that consumes a CUDA submission's results; timeout: seconds, or
// None (no limit); Note [interruptible waits].
nb::tuple wait(int64_t handle, Stream stream, std::optional<double> timeout) {
  std::shared_ptr<Engine> ctx = context_ref();
  Outcome o = wait_interruptibly(*ctx, handle, timeout ? *timeout : -1);
  realign_names(ctx, o);
  {
    nb::gil_scoped_release release;
    ctx.reset();  // may be the last reference if hvdlite was shut down meanwhile
    hand_results_to(take_staging(handle), stream);
  }
  if (o.status != Status::Success) throw Error(o.status, o.error);
  nb::object output = nb::none();
  const bool is_bf16 = o.output.data && o.output_dtype == DataType::BFloat16;
  if (o.output.data && o.output_device >= 0) {
    // A device output (NCCL): a DLPack CUDA array whose memory goes back to the device's pool
    // when its last user goes, once `stream`'s work up to then is done (Note [device outputs
    // back to the pool]).
    std::vector<size_t> shape(o.output_shape.begin(), o.output_shape.end());
    void* data = o.output.release();
    device::device_output_consumed_on(data, reinterpret_cast<device::Stream>(stream ? *stream : 0));
    nb::capsule owner(data, [](void* p) noexcept { device::give_back_device_output(p); });
    output = nb::cast(DeviceOutput{nb::ndarray<>(data, shape.size(), shape.data(), owner, nullptr,
                                                 to_dlpack(o.output_dtype), kDLCUDA, o.output_device)});
  } else if (o.output.data) {
    std::vector<size_t> shape(o.output_shape.begin(), o.output_shape.end());
    void* data = o.output.release();
    nb::capsule owner(data, [](void* p) noexcept { std::free(p); });
    output = nb::cast(nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), owner, nullptr,
                                             to_dlpack(o.output_dtype)));
  }
  nb::object splits = o.received_splits.empty() ? nb::none() : nb::cast(o.received_splits);
  nb::object last = o.last_joined_rank < 0 ? nb::none() : nb::cast(o.last_joined_rank);
  return nb::make_tuple(output, is_bf16, splits, last);
}

// User point-to-point (transport/peer_channel.h): a transfer started on a set's channel, the
// array it reads or fills kept alive with it. Never through the engine's loop or negotiation.
class PeerTransferHandle {
 public:
  PeerTransferHandle(std::unique_ptr<PeerTransfer> transfer, nb::object array)
      : transfer_(std::move(transfer)), array_(std::move(array)) {}
  ~PeerTransferHandle() {
    if (finished_ || !transfer_) return;
    // Dropped unfinished: MPI may still write (or read) the array, so its reference is kept
    // for good rather than let the memory go under a message on its way.
    if (transfer_->abandon()) array_.release();
  }

  bool poll() {
    if (finished_) return true;
    bool done;
    {
      nb::gil_scoped_release release;
      done = transfer_->test();
    }
    finished_ = done;
    return done;
  }

  // Interruptible like the collectives' waits (Note [interruptible waits]); timeout_s < 0:
  // no limit.
  void wait(double timeout_s) {
    using clock = std::chrono::steady_clock;
    const auto deadline =
        timeout_s < 0 || !std::isfinite(timeout_s)
            ? clock::time_point::max()
            : clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
    while (!finished_) {
      bool done;
      {
        nb::gil_scoped_release release;
        const auto now = clock::now();
        done = transfer_->wait_until(deadline - now > kSignalCheck ? now + kSignalCheck : deadline);
      }
      finished_ = finished_ || done;
      if (finished_) break;
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
      if (clock::now() >= deadline) {
        char text[64];
        std::snprintf(text, sizeof text, "%g", timeout_s);
        throw Error(Status::Timeout, std::string("wait(timeout=") + text + ") ran out of time; "
                    "the transfer is still in flight");
      }
    }
  }

  int source() const { return transfer_->source(); }

 private:
  std::unique_ptr<PeerTransfer> transfer_;
  nb::object array_;
  bool finished_ = false;  // the GIL guards it
};

using PeerBytes = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

PeerTransferHandle* start_peer(const char* what, nb::object array, int peer, int tag, int process_set) {
  PeerBytes bytes;
  if (!nb::try_cast<PeerBytes>(array, bytes)) {
    throw Error(Status::InvalidArgument,
                std::string(what) + ": pass the tensor's host memory as a contiguous 1-d uint8 array");
  }
  std::shared_ptr<Engine> eng = context_ref();
  std::shared_ptr<PeerChannel> channel = eng->peer_channel(process_set, what);
  std::unique_ptr<PeerTransfer> transfer =
      std::string(what) == "send" ? channel->send(bytes.data(), bytes.size(), peer, tag)
                                  : channel->recv(bytes.data(), bytes.size(), peer, tag);
  return new PeerTransferHandle(std::move(transfer), std::move(array));
}

}  // namespace

NB_MODULE(_core, m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      nb::object table = nb::module_::import_("hvdlite.exceptions").attr("STATUS_TO_ERROR");
      nb::object cls = table[nb::int_(static_cast<int>(e.status()))];
      PyErr_SetString(cls.ptr(), e.what());
    }
  });

  pthread_atfork(nullptr, nullptr, on_fork_child);
  set_device_collectives_factory(device::make_nccl_collectives);

  m.def("init", [] {
    if (in_forked_child()) return;  // the parent's engine is not this process's to restart
    std::lock_guard<std::mutex> life(g_lifecycle_mu);
    if (current_context()) return;
    Config config = Config::from_env();
    if (!config.timeline.empty()) check_timeline_path(config.timeline, "HVDLITE_TIMELINE");
    std::shared_ptr<Engine> ctx;
    {
      nb::gil_scoped_release release;
      ctx = std::make_shared<Engine>(make_mpi_transport(config.max_transfer_bytes, SharedMemoryOptions{config.shm_lanes, config.shm_sleep_after_us, config.shm_idle_lanes}), config);
    }
    g_owner_pid = getpid();
    if (!config.timeline.empty()) {
      start_timeline_on_rank(config.timeline, ctx->topology().rank, config.timeline_all_ranks,
                             config.timeline_mark_cycles);
    }
    std::lock_guard<std::mutex> lk(g_context_mu);
    g_context = std::move(ctx);
  });
  // Stops the engine (pending requests fail with HvdliteShutdownError) and drops the global
  // reference; threads still waiting keep the engine's memory alive until they return.
  // A no-op in a forked child, where the engine's thread does not exist.
  m.def("shutdown", [] {
    if (in_forked_child()) return;
    std::lock_guard<std::mutex> life(g_lifecycle_mu);
    std::shared_ptr<Engine> ctx;
    {
      std::lock_guard<std::mutex> lk(g_context_mu);
      ctx.swap(g_context);
    }
    if (!ctx) return;
    nb::gil_scoped_release release;
    ctx->shutdown();
    ctx.reset();
    Timeline::get().stop();
  });
  // Elastic recovery (see Engine::rebuild): the survivors' new engine replaces the old one.
  // Returns the lost ranks, numbered as before.
  m.def("rebuild", [] {
    std::lock_guard<std::mutex> life(g_lifecycle_mu);
    std::shared_ptr<Engine> old = context_ref();
    std::vector<int> lost;
    std::shared_ptr<Engine> fresh;
    {
      nb::gil_scoped_release release;
      fresh = old->rebuild(&lost);
    }
    std::lock_guard<std::mutex> lk(g_context_mu);
    g_context = std::move(fresh);
    return lost;
  });
  // Elastic resizing (see Engine::regroup). `add` is one (environment lines, host) pair per
  // new rank. Returns False on the ranks that left (hvdlite is then shut down there).
  m.def("regroup", [](std::vector<int> leaving, std::vector<std::string> command,
                      std::vector<std::pair<std::vector<std::string>, std::string>> add) {
    std::lock_guard<std::mutex> life(g_lifecycle_mu);
    std::shared_ptr<Engine> old = context_ref();
    std::vector<Transport::NewProcess> processes;
    for (auto& a : add) processes.push_back(Transport::NewProcess{a.first, a.second});
    std::shared_ptr<Engine> fresh;
    {
      nb::gil_scoped_release release;
      fresh = old->regroup(leaving, command, processes);
    }
    std::lock_guard<std::mutex> lk(g_context_mu);
    g_context = fresh;
    return fresh != nullptr;
  });
  m.def("finalize", [] {
    if (!in_forked_child()) finalize_mpi_if_owned();
  });
  m.def("is_initialized", [] { return current_context() != nullptr; });
  m.def("in_forked_child", &in_forked_child,
        "True in a fork()ed child of the process that initialized hvdlite (collectives raise there).");
  m.def("rank", [] { return topology().rank; });
  m.def("size", [] { return topology().size; });
  m.def("local_rank", [] { return topology().local_rank; });
  m.def("local_size", [] { return topology().local_size; });
  m.def("cross_rank", [] { return topology().cross_rank; });
  m.def("cross_size", [] { return topology().cross_size; });
  m.def("supported_dtypes", [] {
    std::vector<std::string> names;
    for (const DtypeInfo& d : kDtypes) names.push_back(d.name);
    return names;
  }, "Names of the dtypes the core reduces and moves (numpy spelling).");
  // True when CUDA tensors can go through NCCL: it loads (device_libraries() says which).
  m.def("nccl_built", [] { return device::nccl() != nullptr; });
  m.def("cuda_built", [] { return device::cuda_runtime_info().loaded; },
        "True when a CUDA runtime loaded, so that CUDA tensors can be passed to the core.");
  // Requests NCCL carried in this process, by op (every op it can carry is a key): what
  // --check-build lists and what a device check asserts to know NCCL really ran.
  m.def("nccl_requests_run", [] {
    nb::dict d;
    for (const auto& [op, n] : device::nccl_requests_run()) d[op.c_str()] = n;
    return d;
  });
  // Device outputs (NCCL) in callers' hands and given back to the pool: what the tests check.
  m.def("device_output_counts", [] {
    const device::DeviceOutputCounts c = device::device_output_counts();
    nb::dict d;
    d["live"] = c.live;
    d["given_back"] = c.given_back;
    return d;
  });
  // The libraries' folders of the nvidia-* wheels (src/hvdlite/_device.py finds them); before
  // the first CUDA tensor.
  m.def("set_device_library_dirs", &device::set_library_dirs, nb::arg("cudart"), nb::arg("nccl"));
  m.def("device_libraries", [] {
    auto describe_library = [](const device::LibraryInfo& i) {
      nb::dict d;
      d["loaded"] = i.loaded;
      d["path"] = i.path;
      d["version"] = i.version;
      d["error"] = i.error;
      return d;
    };
    nb::dict d;
    d["cuda_runtime"] = describe_library(device::cuda_runtime_info());
    d["nccl"] = describe_library(device::nccl_library_info());
    // The CUDA devices this process can see (0 without a runtime, or when it finds none).
    int devices = 0;
    const device::CudaRuntime* cuda = device::cuda_runtime();
    if (!cuda || cuda->GetDeviceCount(&devices) != device::kSuccess) devices = 0;
    d["cuda_devices"] = devices;
    return d;
  }, "What --check-build prints: each device library found (path, version) or why not, and "
     "how many CUDA devices are visible.");
  // A forked child must not abort its parent's job: there it does nothing.
  m.def("abort", [](int code) {
    if (!in_forked_child()) context_ref()->abort(code);
  });
  // Bytes this rank sent/received since init (or the last reset=True): the measure behind
  // every "bytes per step" figure; and how many negotiation rounds went through shared memory.
  m.def("transport_stats", [](bool reset) {
    std::shared_ptr<Engine> ctx = context_ref();
    TransportStats& s = ctx->transport_stats();
    auto read = [reset](std::atomic<uint64_t>& c) { return reset ? c.exchange(0) : c.load(); };
    nb::dict d;
    d["bytes_sent"] = read(s.bytes_sent);
    d["bytes_received"] = read(s.bytes_received);
    d["control_bytes_sent"] = read(s.control_bytes_sent);
    d["shared_memory_swaps"] = read(s.shared_memory_swaps);
    d["shared_memory_allreduces"] = read(s.shared_memory_allreduces);
    d["shared_memory_copied_bytes"] = read(s.shared_memory_copied_bytes);
    d["shared_memory_rounds"] = read(s.shared_memory_rounds);
    d["shared_memory_extra_lanes"] = read(s.shared_memory_extra_lanes);
    d["shared_memory_sleeps"] = read(s.shared_memory_sleeps);
    d["board_allreduces"] = read(s.board_allreduces);
    d["shared_memory_collectives"] = read(s.shared_memory_collectives);
    return d;
  }, nb::arg("reset") = false);
  m.def("round_through_wire",
        [](nb::ndarray<const float, nb::c_contig, nb::device::cpu> in,
           nb::ndarray<float, nb::c_contig, nb::device::cpu> out, const std::string& wire) {
          if (in.size() != out.size()) {
            throw Error(Status::InvalidArgument,
                        "round_through_wire: input has " + std::to_string(in.size()) +
                        " elements, output " + std::to_string(out.size()));
          }
          auto* round = wire == "fp16" ? round_floats_through_fp16
                      : wire == "bf16" ? round_floats_through_bf16 : nullptr;
          if (!round) {
            throw Error(Status::InvalidArgument,
                        "round_through_wire: wire must be 'fp16' or 'bf16', not '" + wire + "'");
          }
          nb::gil_scoped_release release;
          round(out.data(), in.data(), in.size());
        },
        nb::arg("input"), nb::arg("output"), nb::arg("wire"),
        "output = float32 input rounded to the 16-bit wire format and back, exactly as the core "
        "packs it (output may be input). For error feedback.");
  m.def("hierarchical_allreduce_active", [] { return context_ref()->hierarchical_allreduce(); });
  m.def("build_info", [] {
    nb::dict d;
    d["nccl"] = device::nccl() != nullptr;
    auto [linkage, path] = libstdcxx_linkage();
    d["libstdcxx"] = linkage;
    d["libstdcxx_path"] = path;
    // The kernels chosen at run time (Note [CPU features at run time]).
    d["adasum_avx2_fma"] = adasum_uses_avx2_fma();
    d["fp16_f16c"] = fp16_uses_cpu_instructions();
    return d;
  });
  // Note [one wheel, any MPI] (csrc/mpi/library.cc): src/hvdlite/mpi_library.py picks the
  // library; loading it initialises nothing (MPI_Init_thread runs in init()).
  m.def("load_mpi", [](const std::string& library, const std::string& plugin_dir) {
    mpi::load(library, plugin_dir);
  }, nb::arg("library"), nb::arg("plugin_dir"));
  m.def("loaded_mpi", []() -> nb::object {
    const mpi::LoadedMpi* m = mpi::loaded();
    if (!m) return nb::none();
    nb::dict d;
    d["library"] = m->library;
    d["abi"] = m->abi;
    d["plugin"] = m->plugin;
    d["version"] = std::string(mpi_library_version());
    d["fault_tolerant"] = mpi_fault_tolerant();
    return d;
  });

  // Every enqueue takes process_set=: the id of the set it runs in (0, the default, is the
  // global set). enqueue_allreduce's wake=False is for a caller that waits at once: its
  // wait() runs the rounds instead of the engine's thread (Group::enqueue).
  m.def("enqueue_allreduce", &enqueue_allreduce, nb::arg("names"), nb::arg("inputs"),
        nb::arg("outputs"), nb::arg("op"), nb::arg("prescale"), nb::arg("postscale"),
        nb::arg("compression"), nb::kw_only(), nb::arg("process_set") = 0,
        nb::arg("wake") = true, nb::arg("stream") = nb::none());
  m.def("run_allreduce", &run_allreduce, nb::arg("names"), nb::arg("inputs"), nb::arg("outputs"),
        nb::arg("op"), nb::arg("prescale"), nb::arg("postscale"), nb::arg("compression"),
        nb::arg("process_set") = 0, nb::arg("stream") = nb::none());
  // Host tensors: eight positional arguments, no names, so that nanobind takes its simplest
  // call path (a good share of a 1-float all-reduce's few microseconds). Args: name, input,
  // output, op, prescale, postscale, compression, process_set.
  m.def("run_allreduce_one", [](const std::string& name, nb::handle input, nb::handle output, int op,
                                double prescale, double postscale, int compression, int process_set) {
    run_allreduce_one(name, input, output, op, prescale, postscale, compression, process_set, Stream());
  });
  m.def("run_allreduce_one_on_stream", &run_allreduce_one, nb::arg("name"), nb::arg("input"),
        nb::arg("output"), nb::arg("op"), nb::arg("prescale"), nb::arg("postscale"),
        nb::arg("compression"), nb::arg("process_set"), nb::arg("stream"));
  m.def("enqueue_broadcast", &enqueue_broadcast, nb::arg("name"), nb::arg("input"),
        nb::arg("output"), nb::arg("root"), nb::kw_only(), nb::arg("process_set") = 0, nb::arg("stream") = nb::none());
  m.def("enqueue_allgather", &enqueue_allgather, nb::arg("name"), nb::arg("input"),
        nb::kw_only(), nb::arg("process_set") = 0, nb::arg("stream") = nb::none(),
        nb::arg("device_output") = false);
  // outputs: host arrays the results land in (Note [outputs the caller gives]); None: the
  // core allocates them and wait() returns them.
  m.def("enqueue_grouped_allgather", &enqueue_grouped_allgather, nb::arg("names"),
        nb::arg("inputs"), nb::kw_only(), nb::arg("process_set") = 0, nb::arg("stream") = nb::none(),
        nb::arg("device_output") = false, nb::arg("outputs") = nb::none());
  m.def("enqueue_alltoall", &enqueue_alltoall, nb::arg("name"), nb::arg("input"),
        nb::arg("splits"), nb::kw_only(), nb::arg("process_set") = 0, nb::arg("stream") = nb::none(),
        nb::arg("device_output") = false);
  m.def("enqueue_reducescatter", &enqueue_reducescatter, nb::arg("name"), nb::arg("input"),
        nb::arg("op"), nb::arg("prescale"), nb::arg("postscale"), nb::kw_only(),
        nb::arg("process_set") = 0, nb::arg("stream") = nb::none(),
        nb::arg("device_output") = false);
  m.def("enqueue_grouped_reducescatter", &enqueue_grouped_reducescatter, nb::arg("names"),
        nb::arg("inputs"), nb::arg("op"), nb::arg("prescale"), nb::arg("postscale"),
        nb::kw_only(), nb::arg("process_set") = 0, nb::arg("stream") = nb::none(),
        nb::arg("device_output") = false, nb::arg("outputs") = nb::none());
  m.def("enqueue_barrier",
        [](const std::string& name, int process_set) { return enqueue_marker(name, OpType::Barrier, process_set); },
        nb::arg("name"), nb::kw_only(), nb::arg("process_set") = 0);
  m.def("enqueue_join",
        [](const std::string& name, int process_set) { return enqueue_marker(name, OpType::Join, process_set); },
        nb::arg("name"), nb::kw_only(), nb::arg("process_set") = 0);
  m.def("poll", [](int64_t h) { return context_ref()->poll(h); });
  nb::class_<DeviceOutput>(m, "DeviceOutput")
      .def("__dlpack__", [](const DeviceOutput& d, nb::kwargs) { return nb::cast(d.array); })
      .def("__dlpack_device__", [](const DeviceOutput& d) {
        return nb::make_tuple(d.array.device_type(), d.array.device_id());
      })
      .def_prop_ro("shape", [](const DeviceOutput& d) {
        std::vector<int64_t> shape(d.array.ndim());
        for (size_t i = 0; i < d.array.ndim(); ++i) shape[i] = static_cast<int64_t>(d.array.shape(i));
        return nb::tuple(nb::cast(shape));
      });

  m.def("start_timeline", [](const std::string& path, bool mark_cycles) {
    std::shared_ptr<Engine> ctx = context_ref();
    start_timeline_on_rank(path, ctx->topology().rank, ctx->config().timeline_all_ranks, mark_cycles);
  });
  m.def("stop_timeline", [] {
    nb::gil_scoped_release release;
    Timeline::get().stop();
  });
  m.def("settings_table", [] {
    std::vector<std::tuple<std::string, std::string, std::string, std::string>> rows;
    for (const SettingInfo& s : settings_table()) rows.emplace_back(s.name, s.alias, s.default_text, s.meaning);
    return rows;
  });
  // Parses every setting (raising on a bad value) and returns the values.
  m.def("read_settings", [] {
    Config c = Config::from_env();
    nb::dict d;
    d["fusion_threshold"] = c.fusion_threshold;
    d["cycle_time_ms"] = c.cycle_time_ms;
    d["cache_capacity"] = c.cache_capacity;
    d["ring_piece_bytes"] = c.ring_piece_bytes;
    d["stall_check_s"] = c.stall_check_s;
    d["stall_shutdown_s"] = c.stall_shutdown_s;
    d["deadlock_s"] = c.deadlock_s;
    d["timeline"] = c.timeline;
    d["timeline_mark_cycles"] = c.timeline_mark_cycles;
    d["timeline_all_ranks"] = c.timeline_all_ranks;
    d["autotune"] = c.autotune;
    d["autotune_log"] = c.autotune_log;
    d["debug"] = c.debug;
    d["abort_on_error"] = c.abort_on_error;
    d["dynamic_process_sets"] = c.dynamic_process_sets;
    d["horovod_names"] = c.horovod_names;
    d["hierarchical_allreduce"] = c.hierarchical_allreduce;
    return d;
  });
  // stream: the CUDA stream that consumes a CUDA submission's results (it waits for them on
  // the device); None: the host waits. Ignored for host tensors. timeout: seconds or None.
  m.def("wait", &wait, nb::arg("handle"), nb::arg("stream") = nb::none(),
        nb::arg("timeout") = nb::none());
  // A future completer's two calls (Note [watched handles] in engine/handle.h): watch these
  // handles; the next watched handle that finished, or None after `timeout` seconds (the GIL
  // released meanwhile). wait() then returns the handle's outcome at once.
  m.def("watch", [](const std::vector<int64_t>& handles) {
    std::shared_ptr<Engine> eng = context_ref();
    for (int64_t h : handles) eng->watch(h);
  }, nb::arg("handles"));
  m.def("next_watched", [](double timeout) -> std::optional<int64_t> {
    std::shared_ptr<Engine> eng = context_ref();
    nb::gil_scoped_release release;
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(timeout));
    std::optional<int64_t> handle = eng->next_watched(until);
    eng.reset();  // may be the last reference if hvdlite was shut down meanwhile
    return handle;
  }, nb::arg("timeout"));

  // Process sets. Adding and removing are collective over the global set and block until
  // every rank has applied the change.
  // Interruptible (Note [interruptible waits]); the GIL is held but while waiting.
  m.def("add_process_set", [](const std::vector<int>& ranks) {
    std::shared_ptr<Engine> eng = context_ref();
    const int id = eng->add_process_set(ranks, [&](int64_t h) { return wait_for_change(eng, h); });
    g_handed.round.erase(id);  // a new set's rounds count from 0 (the id may be a removed set's)
    return id;
  }, nb::arg("ranks"));
  m.def("remove_process_set", [](int id) {
    std::shared_ptr<Engine> eng = context_ref();
    return eng->remove_process_set(id, [&](int64_t h) { return wait_for_change(eng, h); });
  }, nb::arg("id"));
  m.def("process_set_ids", [] { return context_ref()->process_set_ids(); });
  m.def("process_set_ranks", [](int id) { return context_ref()->process_set(id).ranks; }, nb::arg("id"));
  m.def("process_set_rank", [](int id) {
    std::shared_ptr<Engine> eng = context_ref();
    Engine::ProcessSetInfo info = eng->process_set(id);
    if (info.rank < 0) {
      throw Error(Status::InvalidArgument, "rank " + std::to_string(eng->topology().rank) +
                  " is not a member of process set " + std::to_string(id));
    }
    return info.rank;
  }, nb::arg("id"));
  m.def("process_set_size", [](int id) { return static_cast<int>(context_ref()->process_set(id).ranks.size()); },
        nb::arg("id"));
  m.def("process_set_included", [](int id) { return context_ref()->process_set(id).rank >= 0; },
        nb::arg("id"));

  // User point-to-point (PeerTransferHandle): `array` is the tensor's bytes (1-d uint8, host,
  // contiguous); peer and the ranks in errors are ranks of the set; recv's peer -1: any rank.
  nb::class_<PeerTransferHandle>(m, "PeerTransfer")
      .def("poll", &PeerTransferHandle::poll)
      .def("wait", [](PeerTransferHandle& t, std::optional<double> timeout) {
        t.wait(timeout ? *timeout : -1.0);
      }, nb::arg("timeout") = nb::none())
      .def_prop_ro("source", &PeerTransferHandle::source);
  // hvdlite's Python threads (the completion thread, c10d's completers) call it when they
  // start: their CPU time is never taken for the rank computing (Note [computing ranks]).
  m.def("mark_hvdlite_thread", [] { HvdliteThread::mark_for_life(); },
        "Counts the calling thread's CPU time as hvdlite's until it ends.");
  m.def("peer_send", [](nb::object array, int peer, int tag, int process_set) {
    return start_peer("send", std::move(array), peer, tag, process_set);
  }, nb::arg("array"), nb::arg("peer"), nb::arg("tag"), nb::arg("process_set"),
     nb::rv_policy::take_ownership);
  m.def("peer_recv", [](nb::object array, int peer, int tag, int process_set) {
    return start_peer("recv", std::move(array), peer, tag, process_set);
  }, nb::arg("array"), nb::arg("peer"), nb::arg("tag"), nb::arg("process_set"),
     nb::rv_policy::take_ownership);
}
