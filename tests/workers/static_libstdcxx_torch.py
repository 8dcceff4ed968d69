"""A 2-rank torch job on a core built by a compiler that links libstdc++ statically.

Run by tests/test_static_libstdcxx.py with the directory holding that build's ``hvdlite``
package. torch is imported first, so the shared libstdc++ is loaded before the core (the
order that crashed such builds). The job formats doubles in C++ (a mismatch error's message,
the stall of std::ostream that crashed), all-reduces and trains two steps.
"""
import sys

PACKAGE_DIR = sys.argv[1]
# An editable install of the source tree redirects `import hvdlite` there; this job must load
# the static build instead.
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
sys.path.insert(0, PACKAGE_DIR)

import torch  # noqa: E402  (first, on purpose)

torch.set_num_threads(1)

import hvdlite.torch as hvd  # noqa: E402
from hvdlite import _core  # noqa: E402

assert _core.__file__.startswith(PACKAGE_DIR), _core.__file__
info = dict(_core.build_info())
assert info["libstdcxx"] == "static", info

hvd.init()
r, n = hvd.rank(), hvd.size()
x = torch.arange(1000, dtype=torch.float64) * (r + 1) + 0.5
y = hvd.allreduce(x, op=hvd.Sum, name="static.sum")
expected = torch.arange(1000, dtype=torch.float64) * sum(range(1, n + 1)) + 0.5 * n
assert torch.equal(y, expected), (y[:4], expected[:4])

# Ranks disagree about the shape: the core builds the error message (numbers through ostream).
try:
    hvd.allreduce(torch.ones(2 + r), name="static.mismatch")
except hvd.HvdliteError as e:
    assert "static.mismatch" in str(e), str(e)
else:
    raise AssertionError("a shape mismatch raised nothing")

torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for step in range(2):
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
w = hvd.allgather(model.weight.detach().reshape(1, -1), name="static.weights")
assert torch.equal(w[0], w[-1]), "replicas differ after training"
hvd.shutdown()
print(f"rank {r}: static libstdc++ job OK", flush=True)
