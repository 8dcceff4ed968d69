"""One module per Keras backend, each with the same small interface (see hvdlite.keras.backend).

``gradient_reducer(name, op, predivide, compression, sparse_as_dense, process_set, what)``
    -> ``reduce(grads, variables, when=None)``: all-reduce a step's gradients (None stays
    None) as one grouped request named ``<name>.<index>``; with ``when`` (a boolean
    tensor) the collective runs only where it is true and the gradients come back as
    they are otherwise. Works eagerly and inside the backend's compiled train step.
``dense_gradient(g, label, sparse_as_dense, what)``: the gradient as a dense tensor.
``cond(pred, true_fn, false_fn, variables)``: run the variable updates of one branch.
``host_call(fn, args, out_specs, when=None)``: run ``fn(run, *arrays)`` on writable numpy
    copies of ``args`` (eagerly, or from the compiled step) and return its numpy results,
    shaped as ``out_specs`` ((shape, numpy dtype) pairs), as backend tensors. ``run`` is
    ``when`` as a Python bool (True without it): ``fn`` must skip its collectives where it
    is False and still return arrays of the promised shapes. The optimizer options beyond
    Horovod (sharded state, local SGD, stateful compression) are written on this alone.
``allreduce``, ``allgather``, ``broadcast`` on one tensor; ``broadcast_variables``.
``Compression``: the backend's ``Compression.none / fp16 / bf16``.
"""
