"""A fake collective layer for in-process unit tests: ranks are threads, and every
collective is an exchange between them (as the C++ unit tests do over a loopback transport).

``FakeCollectives`` stands in for :mod:`hvdlite.ops` (and ``hvdlite._core``'s ``size``) in
the framework-free algorithms: tests patch it over the module attributes those algorithms
call, then run one function per rank with :func:`run_ranks`.
"""

import threading

import numpy as np

from hvdlite.policy import Average, Max, Sum


class FakeResult:
    def __init__(self, output):
        self.output = output


class FakeWork:
    """A finished collective: ``wait()`` gives its value; iterating gives the Work itself,
    so ``wait_all(work)`` and ``wait_all([work, ...])`` both work, as with hvdlite.work."""

    def __init__(self, value):
        self.value = value

    def wait(self):
        return self.value

    def __iter__(self):
        return iter([self])


class FakeCollectives:
    Average, Max, Sum = Average, Max, Sum

    def __init__(self, size):
        self._size = size
        self._barrier = threading.Barrier(size)
        self._lock = threading.Lock()
        self._slots = {}
        self._local = threading.local()
        self.calls = []         # (rank, kind, names) of every collective, in call order

    # -- the rank a thread plays -------------------------------------------------------
    def rank(self):
        return self._local.rank

    def size(self):
        return self._size

    def _exchange(self, payload):
        """Every rank's ``payload`` (in rank order), once every rank has given its own."""
        key = self._local.seq
        self._local.seq += 1
        with self._lock:
            self._slots.setdefault(key, [None] * self._size)[self.rank()] = payload
        self._barrier.wait()
        everyone = list(self._slots[key])
        self._barrier.wait()
        if self.rank() == 0:
            with self._lock:
                del self._slots[key]
        return everyone

    # -- the subset of hvdlite.ops the algorithms call ------------------------------------
    def grouped_allreduce_async(self, tensors, outputs=None, names=None, op=Average,
                                prescale_factor=1.0, postscale_factor=1.0, compression=None,
                                process_set=None, finish=None, wake=True):
        tensors = list(tensors)
        outputs = tensors if outputs is None else list(outputs)
        self.calls.append((self.rank(), "allreduce", list(names or [])))
        sent = [np.array(t, dtype=np.float64) * prescale_factor for t in tensors]
        if compression == "fp16":
            sent = [s.astype(np.float16).astype(np.float64) for s in sent]
        everyone = self._exchange(sent)
        for i, out in enumerate(outputs):
            total = sum(r[i] for r in everyone)       # rank order: the same sum everywhere
            if op == Max:
                total = np.max([r[i] for r in everyone], axis=0)
            elif op == Average:
                total = total / self._size
            elif op != Sum:
                raise NotImplementedError(f"fake all-reduce of op {op}")
            out[...] = (total * postscale_factor).astype(out.dtype)
        return FakeWork(outputs)

    def reducescatter_async(self, tensor, name=None, op=Average, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None, finish=None):
        """Rank r gets its share of dimension 0 of the reduction, split as Horovod does (the
        first ``n % size`` ranks one row more)."""
        self.calls.append((self.rank(), "reducescatter", [name]))
        everyone = self._exchange(np.array(tensor, dtype=np.float64) * prescale_factor)
        if op not in (Average, Sum):
            raise NotImplementedError(f"fake reduce-scatter of op {op}")
        total = sum(everyone) / (self._size if op == Average else 1)
        n, size, rank = len(total), self._size, self.rank()
        begin = rank * (n // size) + min(rank, n % size)
        mine = total[begin:begin + n // size + (rank < n % size)]
        return FakeWork(FakeResult((mine * postscale_factor).astype(np.asarray(tensor).dtype)))

    def allgather_async(self, tensor, name=None, process_set=None, finish=None):
        self.calls.append((self.rank(), "allgather", [name]))
        everyone = self._exchange(np.array(tensor))
        return FakeWork(FakeResult(np.concatenate(everyone, axis=0)))

    def broadcast_async(self, tensor, root_rank, name=None, process_set=None, finish=None):
        self.calls.append((self.rank(), "broadcast", [name]))
        tensor[...] = self._exchange(np.array(tensor))[root_rank]
        return FakeWork(tensor)

    def broadcast_object(self, obj, root_rank=0, name=None, process_set=None):
        """:func:`hvdlite.numpy_api.broadcast_object`: root's object, on every rank."""
        self.calls.append((self.rank(), "broadcast_object", [name]))
        return self._exchange(obj)[root_rank]

    @staticmethod
    def wait(work):
        return work.wait()

    @staticmethod
    def wait_all(works):
        return [w.wait() for w in works]

    def run_ranks(self, fn):
        """``fn(rank)`` on one thread per rank; returns the results in rank order and
        re-raises the first rank's error."""
        results, errors = [None] * self._size, [None] * self._size

        def play(rank):
            self._local.rank, self._local.seq = rank, 0
            try:
                results[rank] = fn(rank)
            except BaseException as e:  # noqa: BLE001 - re-raised below, on the test's thread
                errors[rank] = e
                self._barrier.abort()

        threads = [threading.Thread(target=play, args=(r,)) for r in range(self._size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        for e in errors:
            if e is not None and not isinstance(e, threading.BrokenBarrierError):
                raise e
        for e in errors:
            if e is not None:
                raise e
        return results
