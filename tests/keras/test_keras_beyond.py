"""hvdlite.keras beyond Horovod on every Keras backend, at 2 ranks (tests/workers/keras_beyond.py):
sharded optimizer state equals the unsharded optimizer and keeps 1/size of the slots; local
SGD with H=1 equals synchronous SGD, with H=4 ranks agree every 4th step after the warm-up;
PowerSGD's state goes into the checkpoint and training resumes exactly; combinations that
cannot work are refused by name. torch runs every optimizer (SGD with momentum, Adam, AdamW);
tensorflow and jax, whose per-step cost is compilation, run Adam."""
import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(420)


def test_sharded_state_local_sgd_compression_state(keras_backend, tmp_path):
    args = [str(tmp_path)] + (["all"] if keras_backend == "torch" else [])
    out = run_mpi(2, "workers/keras_beyond.py", *args, timeout=400,
                  env={"KERAS_BACKEND": keras_backend}).stdout
    for r in range(2):
        assert f"keras_beyond: {keras_backend} rank {r} OK" in out, out[-5000:]
    kinds = ("sgd_momentum", "adam", "adamw") if keras_backend == "torch" else ("adam",)
    for kind in kinds:
        assert f"sharded {kind} process_set=False: max relative error" in out, out[-3000:]
