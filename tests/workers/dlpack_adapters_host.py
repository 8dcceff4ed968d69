"""The TensorFlow and JAX adapters of src/hvdlite/convert/dlpack_arrays.py on host arrays (CI has
no GPU; tests/gpu/test_dlpack_adapters.py runs this at 2 ranks): the output each makes is a
fresh buffer the core writes through DLPack, and the framework then sees the results in it.
TensorFlow's adapter runs whole (its sync hand-off needs no GPU); JAX's stream hand-off is
only implemented by XLA on GPUs, so its export is replaced by a plain one here."""
import numpy as np
import jax
import jax.numpy as jnp
import tensorflow as tf

import hvdlite as hvd
from worker_checks import count, named_check as check  # noqa: E402
from hvdlite.convert import dlpack_arrays, jax_arrays, tf_tensors

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
hvd.init()
rank, size = hvd.rank(), hvd.size()


def values(n, r):
    return (np.arange(n) % 5 + 10 * r + 1).astype(np.float32)


want = {n: sum(values(n, r) for r in range(size)) for n in (7, 300_001)}

# TensorFlow: the real adapter (sync, Empty outputs).
xs = [tf.constant(values(n, rank)) for n in want]
check("tf arrays are not GPU arrays", not dlpack_arrays.on_one_gpu(xs))
outs = dlpack_arrays.grouped_allreduce(tf_tensors.GPU_TENSORS, xs, ["tf.a", "tf.b"], hvd.Sum,
                                       1.0, 1.0, None, 0)
for n, o in zip(want, outs):
    check(f"tf result [{n}]", isinstance(o, tf.Tensor) and np.array_equal(o.numpy(), want[n]))
    check(f"tf result usable [{n}]", np.array_equal((o * 2.0).numpy(), 2 * want[n]))
for n, x in zip(want, xs):
    check(f"tf input kept [{n}]", np.array_equal(x.numpy(), values(n, rank)))
a, b = (tf_tensors.GPU_TENSORS.empty_like(xs[0]) for _ in range(2))
check("tf outputs are fresh buffers", a.__dlpack__ is not None and
      np.asarray(a).__array_interface__["data"][0] != np.asarray(b).__array_interface__["data"][0])


# JAX: the real output allocation, a plain export (no stream on the CPU).
class HostJax(jax_arrays.GpuArrays):
    handoff = "sync"

    def sync(self):
        pass


ys = [jnp.asarray(values(n, rank)) for n in want]
check("jax arrays are not GPU arrays", not dlpack_arrays.on_one_gpu(ys))
outs = dlpack_arrays.grouped_allreduce(HostJax(), ys, ["jax.a", "jax.b"], hvd.Sum, 1.0, 1.0,
                                       None, 0)
for n, o in zip(want, outs):
    check(f"jax result [{n}]", isinstance(o, jax.Array) and np.array_equal(np.asarray(o), want[n]))
    check(f"jax result usable [{n}]", np.array_equal(np.asarray(o * 2), 2 * want[n]))
a, b = (jax_arrays.GPU_ARRAYS.empty_like(ys[0]) for _ in range(2))
check("jax outputs are fresh buffers", a.unsafe_buffer_pointer() != b.unsafe_buffer_pointer())
hvd.shutdown()
print(f"rank {rank}: {count()} checks passed", flush=True)
