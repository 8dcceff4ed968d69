"""``DistributedOptimizer`` with a compression that keeps state between steps:
``Compression.powersgd(...)``, ``Compression.topk(...)``,
``Compression.fp16/bf16(error_feedback=True)``.

The reducers (:mod:`hvdlite.algorithms.error_feedback`, :mod:`hvdlite.algorithms.powersgd`)
need every gradient at once, so the reduction runs in ``synchronize()`` / ``step()``, on
numpy views of the gradients; their state is saved in ``state_dict()`` under
``"hvdlite_compression"``.
"""

import numpy as np
import torch

import hvdlite as _hvd
from hvdlite.algorithms.extra_state import ExtraState
from hvdlite.convert.torch_tensors import dtype_name

from ._wrap import SynchronizeProtocol, require_contiguous, wrap


class CompressedOptimizer(ExtraState, SynchronizeProtocol):
    """Methods placed in front of the wrapped optimizer's class."""

    EXTRA_KEY, SET_UP = "hvdlite_compression", "_reducer"

    def _compressed_setup(self, names, compression, op, prescale, postscale, process_set):
        self._compression = compression
        self._reducer = compression.make_reducer()
        self._reducer.process_set = process_set
        self._reduction = (op, prescale, postscale)
        self._params = require_contiguous(
            [p for g in self.param_groups for p in g["params"] if p.requires_grad], names,
            f"DistributedOptimizer(compression={compression!r})")
        for p in self._params:
            compression.check_dtype(dtype_name(p.dtype), f"parameter '{names[id(p)]}'",
                                    "DistributedOptimizer")
        self._names = [names[id(p)] for p in self._params]
        self._init_protocol()

    def _reduce_gradients(self):
        grads = []
        for p in self._params:
            if p.grad is None:      # unused this step here; others may have one
                p.grad = torch.zeros_like(p)
            if p.grad.is_sparse:
                p.grad = p.grad.to_dense()
            if not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            grads.append(p.grad.detach().numpy())
        self._reducer.reduce(grads, self._names, *self._reduction)

    def _extra_state(self):
        return {k: (torch.from_numpy(np.array(v)) if isinstance(v, np.ndarray) else v)
                for k, v in self._reducer.state_dict(_hvd.rank(), _hvd.size()).items()}

    def _load_extra_state(self, saved):
        self._reducer.load_state_dict(
            {k: (v.numpy() if torch.is_tensor(v) else v) for k, v in saved.items()},
            _hvd.rank(), _hvd.size())


def make_compressed(optimizer, names, compression, op, prescale, postscale, process_set=None):
    opt = wrap(CompressedOptimizer, optimizer)
    opt._compressed_setup(names, compression, op, prescale, postscale, process_set)
    return opt
