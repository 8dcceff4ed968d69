"""Synchronous batch normalization across ranks (``hvd.SyncBatchNorm``).

Unlike Horovod's (which calls CUDA-only torch kernels), this one runs on any device: the
forward all-gathers each rank's (count, mean, centred sum of squares) per channel, one
small tensor, and combines them with the parallel-variance formula; the backward
all-reduces (sum) the two per-channel gradient sums it needs. With equal shards the
result equals ``BatchNorm`` over the global batch.
"""

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

import hvdlite as _hvd
from hvdlite.algorithms.batch_norm import pooled_moments

from .mpi_ops import Sum, allgather, allreduce


def _reduce_dims(x):
    return [0] + list(range(2, x.dim()))


def _per_channel(v, x):
    return v.view([1, -1] + [1] * (x.dim() - 2))


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        c = x.shape[1]
        dims = _reduce_dims(x)
        n_local = x.numel() // c if c else 0
        stat_dtype = torch.float64
        xs = x.to(stat_dtype)
        if n_local > 0:
            mean_l = xs.mean(dims)
            m2_l = ((xs - _per_channel(mean_l, xs)) ** 2).sum(dims)
        else:
            mean_l = xs.new_zeros(c)
            m2_l = xs.new_zeros(c)
        stats = torch.cat([xs.new_tensor([float(n_local)]), mean_l, m2_l]).unsqueeze(0)
        gathered = allgather(stats.cpu()).to(x.device)           # (size, 2c + 1)
        n_total, mean, m2 = pooled_moments(gathered[:, 0], gathered[:, 1:c + 1],
                                           gathered[:, c + 1:], x.shape)
        var = m2 / n_total
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            unbiased = m2 / (n_total - 1)
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        mean = mean.to(x.dtype)
        invstd = invstd.to(x.dtype)
        scale = invstd if weight is None else invstd * weight
        y = (x - _per_channel(mean, x)) * _per_channel(scale, x)
        if bias is not None:
            y = y + _per_channel(bias, x)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.n_total = float(n_total.item())
        return y

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, mean, invstd = ctx.saved_tensors
        dims = _reduce_dims(x)
        c = x.shape[1]
        xmu = x - _per_channel(mean, x)
        sum_dy = grad_out.sum(dims)
        sum_dy_xmu = (grad_out * xmu).sum(dims)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_x = grad_w = grad_b = None
        if need_x:
            # Sum over ranks: the normalization statistics depend on every rank's input.
            total = allreduce(torch.cat([sum_dy, sum_dy_xmu]), op=Sum)
            mean_dy = total[:c] / ctx.n_total
            mean_dy_xmu = total[c:] / ctx.n_total
            scale = invstd if weight is None else invstd * weight
            grad_x = (grad_out - _per_channel(mean_dy, x)
                      - xmu * _per_channel(invstd * invstd * mean_dy_xmu, x)) * _per_channel(scale, x)
        # Parameter gradients stay local: the DistributedOptimizer averages them.
        if weight is not None and need_w:
            grad_w = sum_dy_xmu * invstd
        if need_b:
            grad_b = sum_dy
        return grad_x, grad_w, grad_b, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """BatchNorm whose training-mode statistics cover the batch of every rank.

    Same arguments as ``torch.nn.BatchNorm{1,2,3}d`` (any input of shape ``(N, C, ...)``).
    In eval mode (with running statistics) it is a plain BatchNorm. Every rank must call it
    in the same order (the statistics are exchanged with unnamed collectives).
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if self.momentum is None:
            factor = 0.0
        else:
            factor = self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:   # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        if self.training:
            bn_training = True
        else:
            bn_training = self.running_mean is None and self.running_var is None
        use_running = not self.training or self.track_running_stats
        running_mean = self.running_mean if use_running else None
        running_var = self.running_var if use_running else None
        if not bn_training or _hvd.size() == 1:
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias,
                                bn_training, factor, self.eps)
        return _SyncBatchNormFn.apply(input, self.weight, self.bias, running_mean, running_var,
                                      self.eps, factor)

    @classmethod
    def convert_sync_batchnorm(cls, module):
        """Return ``module`` with every ``BatchNorm*d`` replaced by an hvdlite SyncBatchNorm."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, cls):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats)
            if module.affine:
                with torch.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child))
        return out
