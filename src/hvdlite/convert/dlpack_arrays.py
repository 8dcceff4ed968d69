"""GPU arrays of frameworks other than torch (TensorFlow, JAX) through the core by DLPack:
the core stages them on the device (csrc/device/staging.h) instead of each one being copied
to a numpy array and back. A framework is described by a small adapter (how it orders its
own work before the core's copies, how it makes an output); the core never sees it.

Note [DLPack hand-off without a framework stream]
torch names its current stream, and the core orders its copies after it and hands the
results to it (convert/torch_tensors.py). TensorFlow and JAX name none. Here:
  - the core's producer stream is the legacy default stream (``stream=None``): it records
    an event there and its own stream waits for it;
  - before that, the framework's work on each input and output is ordered before the legacy
    stream, in the framework's own way:
      * ``stream`` hand-off (JAX): ``x.__dlpack__(stream=1)``: by the DLPack Python
        specification the producer makes the consumer's stream (1: the legacy default)
        wait until ``x`` is ready (XLA queues a wait on the buffer's definition event);
      * ``sync`` hand-off (TensorFlow, whose ``__dlpack__`` takes no stream):
        ``tf.test.experimental.sync_devices()`` returns once every GPU op TensorFlow
        queued has finished, so exporting afterwards is safe;
  - the consumer side: neither framework takes an external event for its later kernels on
    an array, so ``Work.wait()`` with no stream blocks the host on the submission's final
    event (cudaEventSynchronize on that event, not on the device): once it returns, the
    results are in the output's memory and any kernel the framework queues later sees them.
The output is a fresh array the framework allocated (zeros / an uninitialised tensor),
exported the same way, written only by the core, and handed to the caller afterwards.
tests/gpu/test_standins.py checks both hand-offs against the stand-in CUDA runtime with
arrays whose producer is a slow fake kernel on a stream of their own: a missing wait or
sync reads stale data there.
"""

from hvdlite import basics, ops as _ops

kDLCUDA = 2
LEGACY_DEFAULT_STREAM = 1  # DLPack's name for CUDA's legacy default stream


def cuda_device(x):
    """The CUDA device id of an array that reports one through ``__dlpack_device__``, else
    None (host arrays, tracers, anything without DLPack)."""
    probe = getattr(x, "__dlpack_device__", None)
    if probe is None:
        return None
    try:
        kind, device = probe()
    except Exception:  # noqa: BLE001 - e.g. a deleted or traced array: not ours to take
        return None
    return int(device) if int(kind) == kDLCUDA else None


class Framework:
    """What the DLPack path needs of a framework (see the Note).

    ``handoff``: "stream" when its ``__dlpack__(stream=)`` orders the array before the given
    stream, "sync" when it does not and ``sync()`` waits for all its GPU work instead.
    ``empty_like(x)``: a fresh array of ``x``'s shape, dtype and device, for an output."""

    name = "?"
    handoff = "sync"

    def sync(self):
        raise NotImplementedError

    def empty_like(self, x):
        raise NotImplementedError


def export(framework, arrays):
    """DLPack capsules of ``arrays``, each ordered before the legacy default stream (the
    producer stream the core is given)."""
    if framework.handoff == "stream":
        return [a.__dlpack__(stream=LEGACY_DEFAULT_STREAM) for a in arrays]
    framework.sync()
    return [a.__dlpack__() for a in arrays]


_cuda_in_core = None


def core_takes_cuda():
    """Whether the core takes CUDA arrays (a CUDA runtime loaded); asked of it once."""
    global _cuda_in_core
    if _cuda_in_core is None:
        _cuda_in_core = basics.cuda_built()
    return _cuda_in_core


def on_one_gpu(arrays):
    """True when every array is on one CUDA device and the core can stage it there."""
    devices = {cuda_device(a) for a in arrays}
    return len(devices) == 1 and None not in devices and core_takes_cuda()


def grouped_allreduce(framework, xs, names, op, prescale, postscale, wire, process_set):
    """All-reduce GPU arrays ``xs`` (one device) into fresh arrays of the framework, which
    it returns once the results are in them (Note [DLPack hand-off without a framework
    stream]). Raises the core's errors."""
    outs = [framework.empty_like(x) for x in xs]
    # Inputs and outputs in one export: one framework sync covers both.
    capsules = export(framework, list(xs) + outs)
    work = _ops.grouped_allreduce_async(capsules[:len(xs)], capsules[len(xs):], names, op,
                                        prescale, postscale, wire, process_set)
    work.wait()  # no stream: the host waits for the results' event (see the Note)
    del xs  # the caller's arrays were held until here: the core read their memory
    return outs
