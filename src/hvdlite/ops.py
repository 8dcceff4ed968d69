"""Framework-free collectives: the layer every adapter (numpy, torch, TensorFlow) calls.

Tensors are any contiguous CPU array the core can read without a copy: numpy arrays
(buffer protocol) and objects with ``__dlpack__`` (torch, TF, JAX tensors). Each call
enqueues its request(s) on the core's background thread and returns a
:class:`~hvdlite.work.Work` at once; ``work.wait()`` returns what ``finish`` makes of the
core's results (by default the list of :class:`~hvdlite.work.Result`) or raises an
:class:`~hvdlite.exceptions.HvdliteError` subclass. A grouped call is ONE Work: its
members negotiate and fuse together, and waiting for it waits for all of them.

Who owns the output:
- allreduce and broadcast write into a caller-provided ``output`` (which may be the input
  itself, for the in-place forms);
- allgather, alltoall and reducescatter produce outputs whose size only the negotiation
  knows, so the core allocates them (``Result.output``; ``Result.array()`` views bfloat16).
  With ``device_output=True`` a caller that can take a CUDA array (a DLPack producer, e.g.
  for ``torch.from_dlpack``) lets CUDA tensors go through NCCL, and their output stays on
  the device; otherwise those are staged and the output is a numpy array.

The Work keeps every array passed in referenced until the core is done with it, so
callers may drop theirs. Policies (op resolution, names, compression) live in
:mod:`hvdlite.policy`.
"""

from typing import Callable, List, Optional, Sequence

from . import _core
from .policy import (Adasum, Average, Max, Min, Product, Sum, auto_name, integer_arg,  # noqa: F401
                      check_adasum_ranks, group_names, resolve_op, valid_name, wire_code)
from .exceptions import HvdliteInvalidArgumentError
from .process_sets import process_set_id
from .work import Result, Work, _orphans, reap_orphans, wait_all as _wait_all  # noqa: F401


def root_rank_arg(root_rank) -> int:
    """A broadcast root: an integer rank of this job."""
    root = integer_arg(root_rank, "root_rank")
    if not 0 <= root < _core.size():
        raise HvdliteInvalidArgumentError(f"root rank {root} is out of range for {_core.size()} ranks")
    return root


def splits_arg(splits) -> List[int]:
    """alltoall splits: a sequence of non-negative integers (numpy arrays and lists alike)."""
    if isinstance(splits, (str, bytes)) or not hasattr(splits, "__iter__"):
        raise HvdliteInvalidArgumentError(f"splits must be a sequence of integers, got {splits!r}")
    return [integer_arg(s, "each split", 0) for s in splits]


_set_id = process_set_id  # a ProcessSet, an id, or None (the world) -> the core's id


def _names(names, n, kind, process_set=None):
    if names is None:
        return [auto_name(kind, None, _set_id(process_set)) for _ in range(n)]
    names = list(map(valid_name, names))
    if len(names) != n:
        raise HvdliteInvalidArgumentError(f"grouped {kind} got {n} tensors but {len(names)} names")
    return names


def grouped_allreduce_async(tensors: Sequence, outputs: Optional[Sequence] = None,
                            names: Optional[Sequence[str]] = None, op: int = Average,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            compression=None, process_set=None,
                            finish: Optional[Callable] = None, *, wake: bool = True,
                            stream=None) -> Work:
    """All-reduce many tensors into ``outputs`` (default: in place) as one group.

    ``stream``: for CUDA tensors, the stream that produced them and consumes the results (an
    int handle, or a callable returning the current one): the core's copies wait for the work
    queued on it, and ``wait()`` makes it wait for the results (the host does not). Without
    it the legacy default stream produces, and ``wait()`` blocks the host until the results
    are on the device.

    ``wake=False`` is for a caller that calls ``wait()`` at once: the waiting thread then
    runs the engine's round itself, saving two thread handoffs (small all-reduces).
    """
    tensors = list(tensors)
    outputs = tensors if outputs is None else list(outputs)
    if len(outputs) != len(tensors):
        raise HvdliteInvalidArgumentError(
            f"grouped_allreduce got {len(tensors)} tensors but {len(outputs)} outputs")
    op = resolve_op(op)
    if op == Adasum:
        check_adasum_ranks(op, _set_id(process_set))
    handles = _core.enqueue_allreduce(_names(names, len(tensors), "allreduce", process_set), tensors, outputs,
                                      op, float(prescale_factor),
                                      float(postscale_factor), wire_code(compression),
                                      wake=wake, **_set_kw(process_set), **_stream_kw(stream))
    return Work(handles, (tensors, outputs), finish, stream=stream)


def grouped_allreduce(tensors: Sequence, outputs: Optional[Sequence] = None,
                      names: Optional[Sequence[str]] = None, op: int = Average,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      compression=None, process_set=None, stream=None) -> None:
    """``grouped_allreduce_async(...).wait()`` without a Work: the calling thread runs the
    engine's rounds itself (no handoff to the engine's thread), which is most of a small
    all-reduce's latency. Returns once every output is written; raises the first error."""
    tensors = list(tensors)
    outputs = tensors if outputs is None else list(outputs)
    if len(outputs) != len(tensors):
        raise HvdliteInvalidArgumentError(
            f"grouped_allreduce got {len(tensors)} tensors but {len(outputs)} outputs")
    reap_orphans()
    op = resolve_op(op)
    if op == Adasum:
        check_adasum_ranks(op, _set_id(process_set))
    # Small all-reduces take a few microseconds in all: the common arguments skip the
    # general conversions (process set, wire format).
    _core.run_allreduce(_names(names, len(tensors), "allreduce", process_set), tensors, outputs,
                        op, float(prescale_factor), float(postscale_factor),
                        0 if compression is None else wire_code(compression),
                        0 if process_set is None else _set_id(process_set), **_stream_kw(stream))


def allreduce(tensor, output=None, name: Optional[str] = None, op: int = Average,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              compression=None, process_set=None, stream=None) -> None:
    """``grouped_allreduce`` of one tensor into ``output`` (default: in place), without the
    lists: the lone small all-reduce, whose whole cost is a few microseconds."""
    set_id = 0 if process_set is None else _set_id(process_set)
    if name is None:
        name = auto_name("allreduce", None, set_id)
    elif name.__class__ is not str:
        name = valid_name(name)
    if _orphans:  # reap_orphans() without the call, in the few-microsecond path
        reap_orphans()
    op = resolve_op(op)
    if op == Adasum:
        check_adasum_ranks(op, set_id)
    output = tensor if output is None else output
    compression = 0 if compression is None else wire_code(compression)
    try:
        if stream is None:  # positional only: the core's quickest call
            _core.run_allreduce_one(name, tensor, output, op, float(prescale_factor),
                                    float(postscale_factor), compression, set_id)
        else:
            _core.run_allreduce_one_on_stream(name, tensor, output, op, float(prescale_factor),
                                              float(postscale_factor), compression, set_id,
                                              **_stream_kw(stream))
    except TypeError:  # the core takes only UTF-8 names: say so if that was it
        valid_name(name)
        raise


def allreduce_async(tensor, output=None, name: Optional[str] = None, op: int = Average,
                    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    compression=None, process_set=None, finish=None, stream=None) -> Work:
    """All-reduce ``tensor`` into ``output`` (default: in place)."""
    return grouped_allreduce_async([tensor], None if output is None else [output],
                                   None if name is None else [name], op, prescale_factor,
                                   postscale_factor, compression, process_set, finish,
                                   stream=stream)


def broadcast_async(tensor, root_rank: int, output=None, name: Optional[str] = None,
                    process_set=None, finish=None, stream=None) -> Work:
    """Broadcast ``tensor`` from ``root_rank`` into ``output`` (default: in place)."""
    output = tensor if output is None else output
    h = _core.enqueue_broadcast(auto_name("broadcast", name, _set_id(process_set)), tensor, output, root_rank_arg(root_rank),
                                **_set_kw(process_set), **_stream_kw(stream))
    return Work([h], (tensor, output), finish, stream=stream)


def grouped_broadcast_async(tensors, root_rank: int, outputs=None, names=None,
                            process_set=None, finish=None, stream=None) -> Work:
    """Broadcast many tensors from ``root_rank`` (one Work)."""
    tensors = list(tensors)
    outputs = tensors if outputs is None else list(outputs)
    names = _names(names, len(tensors), "broadcast", process_set)
    kw, root = {**_set_kw(process_set), **_stream_kw(stream)}, root_rank_arg(root_rank)
    handles = _each((tensors, outputs), [
        (lambda n=n, t=t, o=o: _core.enqueue_broadcast(n, t, o, root, **kw))
        for n, t, o in zip(names, tensors, outputs)])
    return Work(handles, (tensors, outputs), finish, stream=stream)


def allgather_async(tensor, name: Optional[str] = None, process_set=None, finish=None,
                    stream=None, *, device_output: bool = False) -> Work:
    """Concatenate every rank's ``tensor`` along dimension 0 (first dims may differ)."""
    h = _core.enqueue_allgather(auto_name("allgather", name, _set_id(process_set)), tensor, **_set_kw(process_set),
                                **_stream_kw(stream), **_device_kw(device_output))
    return Work([h], tensor, finish, stream=stream)


def grouped_allgather_async(tensors, names=None, process_set=None, finish=None,
                            stream=None, *, device_output: bool = False, outputs=None) -> Work:
    """All-gather many tensors as one group. ``outputs`` (host arrays, one per tensor): the
    results land there, and the Work's results carry no output (Note [outputs the caller
    gives] in csrc/algorithms/collectives.cc); an output of the wrong size fails its request."""
    tensors = list(tensors)
    handles = _core.enqueue_grouped_allgather(_names(names, len(tensors), "allgather", process_set), tensors,
                                              **_set_kw(process_set), **_stream_kw(stream),
                                              **_device_kw(device_output), **_outputs_kw(outputs))
    return Work(handles, (tensors, outputs), finish, stream=stream)


def alltoall_async(tensor, splits: Optional[Sequence[int]] = None, name: Optional[str] = None,
                   process_set=None, finish=None, stream=None, *,
                   device_output: bool = False) -> Work:
    """Send ``splits[i]`` rows of ``tensor`` to rank i (default: equal parts); receive likewise."""
    split_list = [] if splits is None else splits_arg(splits)
    h = _core.enqueue_alltoall(auto_name("alltoall", name, _set_id(process_set)), tensor, split_list,
                               **_set_kw(process_set), **_stream_kw(stream),
                               **_device_kw(device_output))
    return Work([h], tensor, finish, stream=stream)


def reducescatter_async(tensor, name: Optional[str] = None, op: int = Average,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                        process_set=None, finish=None, stream=None, *,
                        device_output: bool = False) -> Work:
    """Reduce ``tensor`` across ranks and give rank r its share of dimension 0.

    Dimension 0 is split as in Horovod: every rank gets ``n // size`` rows and the first
    ``n % size`` ranks one more.
    """
    h = _core.enqueue_reducescatter(auto_name("reducescatter", name, _set_id(process_set)), tensor, resolve_op(op),
                                    float(prescale_factor), float(postscale_factor),
                                    **_set_kw(process_set), **_stream_kw(stream),
                                    **_device_kw(device_output))
    return Work([h], tensor, finish, stream=stream)


def grouped_reducescatter_async(tensors, names=None, op: int = Average,
                                prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                                process_set=None, finish=None, stream=None, *,
                                device_output: bool = False, outputs=None) -> Work:
    """Reduce-scatter many tensors as one group; ``outputs`` as for grouped_allgather_async."""
    tensors = list(tensors)
    handles = _core.enqueue_grouped_reducescatter(
        _names(names, len(tensors), "reducescatter", process_set), tensors, resolve_op(op),
        float(prescale_factor), float(postscale_factor), **_set_kw(process_set),
        **_stream_kw(stream), **_device_kw(device_output), **_outputs_kw(outputs))
    return Work(handles, (tensors, outputs), finish, stream=stream)


def barrier_async(name: Optional[str] = None, process_set=None) -> Work:
    return Work([_core.enqueue_barrier(auto_name("barrier", name, _set_id(process_set)), **_set_kw(process_set))])


def join_async(name: Optional[str] = None, finish=None) -> Work:
    """This rank has no more data: it contributes zeros to others' all-reduces until all join."""
    return Work([_core.enqueue_join(auto_name("join", name))], None, finish)


def last_joined_rank(results) -> int:
    """join's value: the rank that joined last (-1 if the core did not say)."""
    last = results[0].last_joined_rank
    return -1 if last is None else int(last)


def wait(work) -> Result:
    """The Result of a Work of one request made without a finish step."""
    return Work.lookup(work, "wait").wait()[0]


def wait_all(works) -> list:
    """Results of a group's Work, or of a list of Works (each without a finish step); every
    one is waited for before the first error is raised."""
    if isinstance(works, Work):
        return works.wait()
    return [r for results in _wait_all(list(works)) for r in results]


def poll(handle) -> bool:
    """True once the operation behind ``handle`` (a Work or its int) has finished."""
    return Work.lookup(handle, "poll").poll()


def synchronize(handle):
    """Wait for ``handle`` (a Work or its int); return its value or raise its error."""
    return Work.lookup(handle, "synchronize").synchronize()


def _each(refs, enqueues):
    """Run one enqueue per member; if one fails, the members already enqueued stay
    referenced (as a dropped Work) until the core is done with them."""
    handles = []
    try:
        for enqueue in enqueues:
            handles.append(enqueue())
    except Exception:
        Work(handles, refs)
        raise
    return handles


def _stream_kw(stream):
    """``stream=`` for the core: the CUDA stream that produced CUDA inputs (an int, or a
    callable giving one), passed only when given. Host tensors ignore it."""
    return {} if stream is None else {"stream": int(stream() if callable(stream) else stream)}


def _device_kw(device_output):
    """``device_output=`` for the core, passed only when the caller takes CUDA outputs."""
    return {"device_output": True} if device_output else {}


def _outputs_kw(outputs):
    """``outputs=`` for the core, passed only when the caller gives them."""
    return {} if outputs is None else {"outputs": list(outputs)}


def _set_kw(process_set):
    """``process_set=`` for the core, passed only for a non-world set."""
    set_id = _set_id(process_set)
    return {"process_set": set_id} if set_id else {}
