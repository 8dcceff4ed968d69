"""One module per Keras backend, each with the same small interface (see hvdlite.keras.backend).

``gradient_reducer(name, op, predivide, compression, sparse_as_dense, process_set, what)``
    -> ``reduce(grads, variables, when=None)``: all-reduce a step's gradients (None stays
    None) as one grouped request named ``<name>.<index>``; with ``when`` (a boolean
    tensor) the collective runs only where it is true and the gradients come back as
    they are otherwise. Works eagerly and inside the backend's compiled train step.
``dense_gradient(g, label, sparse_as_dense, what)``: the gradient as a dense tensor.
``cond(pred, true_fn, false_fn, variables)``: run the variable updates of one branch.
``allreduce``, ``allgather``, ``broadcast`` on one tensor; ``broadcast_variables``.
``Compression``: the backend's ``Compression.none / fp16 / bf16``.
"""
