"""Reduction rules the bridges share: gradient_predivide_factor, wire compression routing,
and error messages that say which variable a request name stands for."""

import inspect

import hvdlite as _hvd
from hvdlite.compression import NoneCompressor, is_stateful
from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.ops import Adasum, Average, Max, Min, Product, Sum


_OPS = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product"}


def resolve_op(op, average, what):
    """Horovod's ``op=`` / deprecated ``average=`` rules; returns a reduce op hvdlite has."""
    if op is not None and average is not None:
        raise ValueError(f"{what}: pass either op= or the deprecated average=, not both")
    if average is not None:
        op = Average if average else Sum
    op = Average if op is None else op
    if op == Adasum:
        raise HvdliteInvalidArgumentError(f"{what}: op=Adasum is not supported by hvdlite; "
                                          f"use Average or Sum")
    if op not in _OPS:
        raise HvdliteInvalidArgumentError(f"{what}: unknown reduce op {op!r}; use Average, "
                                          f"Sum, Min, Max or Product")
    return int(op)


def check_predivide(op, predivide, what):
    if predivide <= 0:
        raise ValueError(f"{what}: gradient_predivide_factor must be > 0, got {predivide}")
    if predivide != 1.0 and op != Average:
        raise ValueError(f"{what}: gradient_predivide_factor is only supported with op=Average")


def set_size(process_set=None):
    """The number of ranks in ``process_set`` (None: all ranks)."""
    return process_set.size() if process_set is not None else _hvd.size()


def reduction(op, predivide, process_set=None):
    """(op, prescale, postscale) for the core: with a predivide factor f, Average is a Sum
    scaled by 1/f before and f/size after (Horovod's gradient_predivide_factor)."""
    if op == Average and predivide != 1.0:
        return Sum, 1.0 / predivide, predivide / set_size(process_set)
    return op, 1.0, 1.0


def wire_format(compression, packable, floating):
    """(wire name for the core or None, whether compress/decompress runs in the framework).

    The built-in fp16/bf16 compressors are packed by the core for float32/float64 tensors
    (``packable``) and leave integer tensors alone; other compressors run as written."""
    if compression is None or compression is NoneCompressor:
        return None, False
    wire = getattr(compression, "wire_dtype", None)
    if wire is not None:
        if packable:
            return wire, False
        if not floating:
            return None, False
    return None, True


def with_labels(error, labels):
    """The error again, its message followed by what the request names in it stand for
    (``'DistributedSGD.0' is the gradient of dense/kernel``)."""
    text = str(error)
    hits = [f"'{n}' is the gradient of {label}" for n, label in labels.items()
            if f"'{n}'" in text]
    if not hits:
        return error
    try:
        return type(error)(f"{text} ({'; '.join(hits)})")
    except Exception:  # noqa: BLE001 - an error type with another constructor
        return error


def variable_label(variable, i):
    return getattr(variable, "path", None) or getattr(variable, "name", None) or f"variable {i}"


def process_set_kwargs(fn, process_set):
    """``{"process_set": process_set}`` for ``fn`` (nothing for the default set); a clear
    error where ``fn`` cannot take one."""
    if process_set is None:
        return {}
    if "process_set" not in inspect.signature(fn).parameters:
        raise NotImplementedError(f"{fn.__module__}.{fn.__qualname__} does not take "
                                  f"process_set in this build of hvdlite")
    return {"process_set": process_set}


def refuse_stateful(compression, what):
    """Stateful compression (PowerSGD, top-k, error feedback) runs on the TensorFlow
    backend only, through hvdlite.tensorflow's reducer crossing."""
    if is_stateful(compression):
        raise NotImplementedError(
            f"{what}: compression={compression!r} keeps state between steps, which "
            f"hvdlite.keras supports on the TensorFlow backend only so far (torch.optim "
            f"optimizers: hvdlite.torch.DistributedOptimizer supports it)")
