"""Ranks whose models differ: model.fit must stop the job with an error naming the
gradient request and its variable, not hang, on the backend KERAS_BACKEND names. Imports
hvdlite.keras, or the module named by the first argument (e.g. hvdlite.tensorflow.keras).
Run by tests/keras/test_keras_backends.py and tests/tensorflow/test_keras.py (expect failure)."""
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_common  # noqa: E402,F401

import numpy as np  # noqa: E402
import keras  # noqa: E402

hvd = importlib.import_module(sys.argv[1] if len(sys.argv) > 1 else "hvdlite.keras")

hvd.init()
width = 16 + hvd.rank()          # every rank a different hidden width
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(width), keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
model.fit(np.ones((32, 8), np.float32), np.ones((32, 1), np.float32), batch_size=8, verbose=0)
print("UNREACHABLE: training with mismatched models finished", flush=True)
