"""The small helpers Horovod programs and Horovod's own tests import from
``horovod.common.util`` (served by this module under Horovod's names, docs/horovod.md), with
Horovod 0.28.1's behaviour: the build queries (hvdlite.basics' own functions), ``env``,
``_cache``, ``is_version_greater_equal_than``, ``extension_available`` and a few list and
number helpers.
"""

import contextlib
import functools
import importlib.util
import os

from .basics import (ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled,  # noqa: F401
                     gpu_available, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
                     rocm_built)

#: The framework extensions Horovod knows by name (``extension_available``'s argument).
EXTENSIONS = ["tensorflow", "torch", "mxnet"]

# An extension is hvdlite's adapter for the framework: available when the framework is
# installed (hvdlite.mxnet does not exist).
_ADAPTER_NEEDS = {"tensorflow": "tensorflow", "torch": "torch"}


def _cache(f):
    """``f`` computed once per distinct arguments (positional, and keyword in any order),
    then the stored result: Horovod's memo for its expensive queries. Arguments must be
    hashable."""
    results = {}

    @functools.wraps(f)
    def cached(*args, **kwargs):
        key = (args, frozenset(kwargs.items()))
        try:
            return results[key]
        except KeyError:
            value = results[key] = f(*args, **kwargs)
            return value

    return cached


@contextlib.contextmanager
def env(**variables):
    """Sets the environment variables given (a value of None: left alone) for the ``with``
    block, then puts back what was there before (removing those that were not set)."""
    variables = {name: value for name, value in variables.items() if value is not None}
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@_cache
def is_version_greater_equal_than(ver, target):
    """Whether version string ``ver`` is at least ``target``, a ``major.minor.patch`` string
    (PEP 440 comparison: ``'2.6.0rc1' < '2.6.0'``). ValueError for other arguments."""
    from packaging import version
    if not isinstance(ver, str) or not isinstance(target, str):
        raise ValueError(f"is_version_greater_equal_than takes two strings; got ver={ver!r} "
                         f"({type(ver).__name__}) and target={target!r} "
                         f"({type(target).__name__})")
    if len(target.split(".")) != 3:
        raise ValueError(f"the target version must be major.minor.patch; got {target!r}")
    return version.parse(ver) >= version.parse(target)


def extension_available(ext_base_name, verbose=False):
    """Whether hvdlite serves the framework extension ``ext_base_name`` (``'torch'``,
    ``'tensorflow'``, ``'mxnet'``): its framework is installed (found without importing it).
    Always False for MXNet, which hvdlite has no adapter for."""
    framework = _ADAPTER_NEEDS.get(ext_base_name)
    available = framework is not None and importlib.util.find_spec(framework) is not None
    if verbose:
        print(f"Extension {ext_base_name} {'was' if available else 'was NOT'} built.")
    return available


def num_rank_is_power_2(num_rank):
    """Whether ``num_rank`` is a power of two (Adasum's requirement)."""
    return num_rank > 0 and num_rank & (num_rank - 1) == 0


def split_list(items, n):
    """``items`` in ``n`` consecutive parts, the first ``len(items) % n`` one longer."""
    size, extra = divmod(len(items), n)
    bounds = [i * size + min(i, extra) for i in range(n + 1)]
    return [items[bounds[i]:bounds[i + 1]] for i in range(n)]


def is_iterable(x):
    """Whether ``iter(x)`` works."""
    try:
        iter(x)
    except TypeError:
        return False
    return True
