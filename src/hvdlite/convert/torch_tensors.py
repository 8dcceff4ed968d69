"""torch tensors in and out of the core: the one check of a tensor, host staging (DLPack
takes contiguous CPU memory without a copy; CUDA memory too where the core loaded a CUDA
runtime, with the stream that produced it), and wrapping the core's outputs."""

import torch

from hvdlite import basics, policy
from hvdlite.exceptions import HvdliteInvalidArgumentError

from .dlpack_arrays import core_takes_cuda


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def describe(tensor, name):
    label = f"'{name}'" if name is not None else "(unnamed)"
    return (f"tensor {label} (shape {list(tensor.shape)}, dtype {tensor.dtype}, "
            f"device {tensor.device})")


def require_tensor(tensor, name, opname):
    if not isinstance(tensor, torch.Tensor):
        raise HvdliteInvalidArgumentError(
            f"hvdlite.torch.{opname}: expected a torch.Tensor"
            f"{'' if name is None else f' for {name!r}'}, got {type(tensor).__name__}")


def require_tensors(tensors, names, opname):
    for t, n in zip(tensors, names):
        require_tensor(t, n, opname)


def check_tensors(tensors, names, opname, inplace=False):
    for t, n in zip(tensors, names):
        check_tensor(t, n, opname, inplace)


def check_tensor(tensor, name, opname, inplace=False):
    """The check of a tensor handed to the core: a dense torch tensor of a dtype the core
    moves (contiguous, for the in-place ops)."""
    require_tensor(tensor, name, opname)
    if tensor.layout != torch.strided:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.torch.{opname}: {describe(tensor, name)} has layout {tensor.layout}; "
            f"only dense tensors are supported (use .to_dense())")
    policy.check_dtype(dtype_name(tensor.dtype), f"hvdlite.torch.{opname}",
                       describe(tensor, name))
    if inplace and not tensor.is_contiguous():
        raise HvdliteInvalidArgumentError(
            f"hvdlite.torch.{opname}: {describe(tensor, name)} is not contiguous; in-place "
            f"operations write the result into the tensor's memory and need a contiguous "
            f"tensor. Pass t.contiguous() (and use that tensor), or use the out-of-place "
            f"{opname.rstrip('_')}().")


def host(tensor):
    """(contiguous tensor without autograd that the core can take, copied?): CPU tensors, and
    CUDA tensors where the core takes them (else a CPU copy)."""
    t = tensor.detach()
    copied = False
    if t.device.type != "cpu" and not (t.device.type == "cuda" and core_takes_cuda()):
        t, copied = t.to("cpu"), True
    if not t.is_contiguous():
        t, copied = t.contiguous(), True
    if t.is_neg():
        t, copied = t.resolve_neg(), True
    return t, copied


def stream(tensors):
    """``stream=`` for the ops: None for host tensors; for CUDA tensors, the current stream of
    their device, read at submission (the producer) and again at ``wait()`` (the consumer)."""
    for t in tensors:
        if t.device.type == "cuda":
            device = t.device
            return lambda: torch.cuda.current_stream(device).cuda_stream
    return None


def from_core(result, device):
    """Wrap a core-allocated output as a torch tensor without a copy: a numpy array, or the
    CUDA array NCCL left on the device (requests made with ``device_output=True``)."""
    out = result.output
    t = torch.from_numpy(out) if hasattr(out, "__array_interface__") else torch.from_dlpack(out)
    if result.bfloat16:
        t = t.view(torch.bfloat16)
    return t if device.type == "cpu" else t.to(device)


def copy_back(dst, src):
    """Write the host result ``src`` into the caller's (CUDA / strided) tensor ``dst``."""
    with torch.no_grad():
        dst.detach().copy_(src)


class Staged:
    """Checked tensors handed to the core for an op whose output has the input's shape."""

    def __init__(self, tensors, inplace):
        self.tensors, self.inplace = tensors, inplace
        self.bufs, self.outs, self.back = [], [], []
        for t in tensors:
            buf, copied = host(t)
            self.bufs.append(buf)
            # in place: into the caller's memory (or our host copy, copied back after)
            self.outs.append(buf if inplace or copied else torch.empty_like(buf))
            self.back.append(inplace and copied)

    def finish(self, _results):
        if self.inplace:
            for t, out, back in zip(self.tensors, self.outs, self.back):
                if back:
                    copy_back(t, out)
            return list(self.tensors)
        return [out if t.device.type == "cpu" else out.to(t.device)
                for t, out in zip(self.tensors, self.outs)]


def group_wire(compression, tensors):
    """One wire format for a group of torch tensors, and whether Python must compress."""
    formats = [policy.wire_format(compression, dtype_name(t.dtype)) for t in tensors]
    wires = {w for w, _ in formats if w is not None}
    return (wires.pop() if wires else None), any(p for _, p in formats)
