"""Arrays in the stand-in CUDA runtime's "device" memory that report a CUDA device through
DLPack (kDLCUDA), so the core takes them as it takes torch's CUDA tensors; and the stand-in's
test hooks (fake kernels, counters) through ctypes."""
import ctypes
import os

import numpy as np

kDLCUDA = 2
_DTYPE_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CAPSULE_NAME = ctypes.create_string_buffer(b"dltensor")
_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_NUMPY_KINDS = {0: "i", 1: "u", 2: "f"}


class StandinRuntime:
    """The stand-in library (the same file the core loads: one copy in the process)."""

    def __init__(self, path=None):
        self.path = path or os.environ["HVDLITE_CUDA_RUNTIME_LIBRARY"]
        lib = self.lib = ctypes.CDLL(self.path)
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        lib.cudaMemcpyAsync.argtypes = [vp, vp, sz, ctypes.c_int, vp]
        lib.cudaStreamSynchronize.argtypes = [vp]
        lib.cudaStreamCreateWithFlags.argtypes = [ctypes.POINTER(vp), ctypes.c_uint]
        lib.cudaMalloc.argtypes = [ctypes.POINTER(vp), sz]
        lib.cudaFree.argtypes = [vp]
        lib.cudaEventCreateWithFlags.argtypes = [ctypes.POINTER(vp), ctypes.c_uint]
        lib.cudaEventRecord.argtypes = [vp, vp]
        lib.cudaStreamWaitEvent.argtypes = [vp, vp, ctypes.c_uint]
        lib.standin_fill_async.argtypes = [vp, vp, sz, sz, ctypes.c_long, vp]
        lib.standin_read_async.argtypes = [vp, vp, sz, vp]
        lib.standin_copies.restype = ctypes.c_long
        lib.standin_violations.argtypes = [ctypes.c_char_p, sz]
        lib.standin_violations.restype = sz

    def check(self, rc, what):
        if rc != 0:
            raise RuntimeError(f"stand-in {what} failed with {rc}")

    def stream(self):
        s = ctypes.c_void_p()
        self.check(self.lib.cudaStreamCreateWithFlags(ctypes.byref(s), 1), "stream create")
        return s.value

    def sync(self, stream):
        self.check(self.lib.cudaStreamSynchronize(stream), "stream sync")

    def fill_async(self, array, values, delay_us, stream):
        """A fake kernel on `stream`: after delay_us, write `values` (numpy) into `array`."""
        buf = np.ascontiguousarray(values, dtype=array.dtype)
        assert buf.nbytes == array.nbytes
        self.check(self.lib.standin_fill_async(array.ptr, buf.ctypes.data, buf.nbytes, buf.nbytes,
                                               int(delay_us), stream), "fill")

    def read_async(self, array, stream):
        """A fake kernel on `stream` that reads `array`; returns the host array it fills."""
        out = np.empty(array.shape, array.dtype)
        self.check(self.lib.standin_read_async(out.ctypes.data, array.ptr, array.nbytes, stream),
                   "read")
        return out

    def unwaited_events(self):
        return self.lib.standin_unwaited_events()

    def copies(self):
        return self.lib.standin_copies()

    def mallocs(self):
        """cudaMalloc calls since the last reset."""
        return self.lib.standin_mallocs()

    def violations(self):
        buf = ctypes.create_string_buffer(65536)
        self.lib.standin_violations(buf, len(buf))
        return buf.value.decode()

    def reset(self):
        self.lib.standin_reset_counters()


class DeviceArray:
    """A C-contiguous array in stand-in device memory, exported as a kDLCUDA DLPack tensor."""

    def __init__(self, runtime, shape, dtype, device=0):
        self.rt, self.shape, self.dtype = runtime, tuple(shape), np.dtype(dtype)
        self.device = device
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        p = ctypes.c_void_p()
        runtime.check(runtime.lib.cudaMalloc(ctypes.byref(p), max(self.nbytes, 1)), "cudaMalloc")
        self.ptr = p.value
        self._exports = []  # DLPack structs handed out: alive as long as this array

    @classmethod
    def from_numpy(cls, runtime, values, device=0):
        values = np.ascontiguousarray(values)
        a = cls(runtime, values.shape, values.dtype, device)
        a.upload(values)
        return a

    @classmethod
    def from_dlpack(cls, runtime, obj):
        """A view of a CUDA array the core returned (a DLPack producer), without owning it.
        Raises AssertionError unless it reports a CUDA device and lies in device memory."""
        device_type, device_id = obj.__dlpack_device__()
        assert device_type == kDLCUDA, f"not a CUDA array: DLPack device type {device_type}"
        capsule = obj.__dlpack__()
        mt = DLManagedTensor.from_address(_PyCapsule_GetPointer(capsule, b"dltensor"))
        t = mt.dl_tensor
        shape = tuple(t.shape[i] for i in range(t.ndim))
        dtype = np.dtype(f"{_NUMPY_KINDS[t.dtype.code]}{t.dtype.bits // 8}")
        a = cls.__new__(cls)
        a.rt, a.shape, a.dtype, a.device = runtime, shape, dtype, device_id
        a.nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        a.ptr = t.data + t.byte_offset
        a._exports = []
        a._owner = (obj, capsule)  # the core frees the memory when these go
        assert runtime.lib.standin_is_device(ctypes.c_void_p(a.ptr), ctypes.c_size_t(max(a.nbytes, 1))), \
            "the array's data is not stand-in device memory"
        return a

    def upload(self, values, stream=0):
        values = np.ascontiguousarray(values, dtype=self.dtype)
        self.rt.check(self.rt.lib.cudaMemcpyAsync(self.ptr, values.ctypes.data, self.nbytes, 1,
                                                  stream), "upload")
        self.rt.sync(stream)

    def numpy(self, stream=0):
        """The contents, after everything queued on `stream` (host waits)."""
        out = np.empty(self.shape, self.dtype)
        self.rt.check(self.rt.lib.cudaMemcpyAsync(out.ctypes.data, self.ptr, self.nbytes, 2,
                                                  stream), "download")
        self.rt.sync(stream)
        return out

    def __dlpack_device__(self):
        return (kDLCUDA, self.device)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        ndim = len(self.shape)
        shape = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
        mt = DLManagedTensor()
        mt.dl_tensor.data = self.ptr
        mt.dl_tensor.device = DLDevice(kDLCUDA, self.device)
        mt.dl_tensor.ndim = ndim
        kind = self.dtype.kind
        mt.dl_tensor.dtype = DLDataType(_DTYPE_CODES[kind], self.dtype.itemsize * 8, 1)
        mt.dl_tensor.shape = shape
        mt.dl_tensor.strides = None
        mt.dl_tensor.byte_offset = 0
        mt.manager_ctx = None
        mt.deleter = None
        self._exports.append((mt, shape))
        return _PyCapsule_New(ctypes.addressof(mt), _CAPSULE_NAME, None)

    def __del__(self):
        if getattr(self, "_owner", None) is not None:
            return  # a view of the core's output: not ours to free
        try:
            self.rt.lib.cudaFree(self.ptr)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class FrameworkArray(DeviceArray):
    """An array of a stand-in framework (as a TensorFlow or JAX GPU array): written by the
    framework's own kernels on its own stream, exported through DLPack. With
    ``honours_stream`` its ``__dlpack__(stream=s)`` makes ``s`` wait for that work (JAX's
    way); without, it ignores ``stream`` (TensorFlow's) and only a framework sync orders it."""

    def __init__(self, framework, shape, dtype, device=0):
        super().__init__(framework.rt, shape, dtype, device)
        self.fw = framework

    def produce(self, values, delay_us):
        """A slow fake kernel on the framework's stream writes ``values``."""
        self.rt.fill_async(self, values, delay_us, self.fw.stream)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if stream is not None and self.fw.honours_stream:
            rt = self.rt
            e = ctypes.c_void_p()
            rt.check(rt.lib.cudaEventCreateWithFlags(ctypes.byref(e), 2), "event create")
            rt.check(rt.lib.cudaEventRecord(e, self.fw.stream), "event record")
            rt.check(rt.lib.cudaStreamWaitEvent(stream, e, 0), "stream wait")
            rt.lib.cudaEventDestroy.argtypes = [ctypes.c_void_p]
            rt.lib.cudaEventDestroy(e)
        return super().__dlpack__(stream, max_version, dl_device, copy)


class StandinFramework:
    """The adapter hvdlite.convert.dlpack_arrays needs, for FrameworkArray: ``handoff``
    "stream" or "sync"; ``broken=True`` makes its hand-off do nothing (a missing wait)."""

    def __init__(self, runtime, handoff, broken=False):
        self.rt, self.handoff, self.broken = runtime, handoff, broken
        self.name = f"stand-in ({handoff})"
        self.honours_stream = handoff == "stream" and not broken
        self.stream = runtime.stream()

    def sync(self):
        if not self.broken:
            self.rt.sync(self.stream)

    def empty_like(self, x):
        return FrameworkArray(self, x.shape, x.dtype, x.device)

    def array(self, values, delay_us=20_000):
        values = np.ascontiguousarray(values)
        a = FrameworkArray(self, values.shape, values.dtype)
        a.produce(values, delay_us)
        return a
