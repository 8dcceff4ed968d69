"""Small modules that move one framework's tensors in and out of the core, below every
adapter: ``hvdlite.torch`` and the Keras torch bridge share :mod:`.torch_tensors` and
:mod:`.torch_requests`; ``hvdlite.tensorflow`` and the Keras TensorFlow bridge share
:mod:`.tf_tensors`. No autograd here: that glue is the adapters'.
"""
