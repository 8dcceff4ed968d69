"""Gradient accumulation (``backward_passes_per_step``): the countdown of backward passes
before a gradient is complete, written once for the all-reduce and the sharded optimizers."""

from hvdlite.exceptions import HvdliteInvalidArgumentError


class GradientAccumulationError(HvdliteInvalidArgumentError, AssertionError):
    """A gradient was computed more than ``backward_passes_per_step`` times before ``step()``.

    Also an AssertionError, which is what Horovod raises in this case.
    """


def check_passes(passes, what=None) -> int:
    if int(passes) < 1:
        raise ValueError(f"{what + ': ' if what else ''}backward_passes_per_step must be >= 1, "
                         f"got {passes}")
    return int(passes)


class Countdown:
    """Backward passes left, per key (a parameter or its index), before its gradient is
    complete for this step; keys in a group (a bucket, ``groups=``) complete together."""

    def __init__(self, passes, keys=()):
        self.passes = check_passes(passes)
        self.left = dict.fromkeys(keys, self.passes)
        self.group_of, self.waiting = {}, {}    # key -> its group; group -> members left

    def add(self, key):
        self.left[key] = self.passes

    def group(self, members):
        """``members`` (keys) complete together: :meth:`arrive` reports them at the last."""
        members = tuple(members)
        self.group_of.update(dict.fromkeys(members, members))
        self.waiting[members] = len(members)

    def reset(self, passes=None):
        """A new step (or a new ``backward_passes_per_step``): every key starts again."""
        if passes is not None:
            self.passes = check_passes(passes)
        self.left = dict.fromkeys(self.left, self.passes)
        self.waiting = {g: len(g) for g in self.waiting}

    def units(self):
        """What completes together, in order: each key not in a group alone (as a 1-tuple),
        then each group."""
        return [(k,) for k in self.left if k not in self.group_of] + list(self.waiting)

    def exhausted(self, key) -> bool:
        """Whether ``key`` has had every pass of this step (one more would be too many)."""
        return self.left[key] <= 0

    def arrive(self, key, name):
        """One more pass produced ``key``'s gradient. Returns what that completes: the key's
        group (a tuple of keys; the key alone if it has none) once every member is
        complete, else None."""
        if self.left[key] <= 0:
            self.too_many(name)
        self.left[key] -= 1
        if self.left[key]:
            return None
        group = self.group_of.get(key, (key,))
        if key in self.group_of:
            self.waiting[group] -= 1
            if self.waiting[group]:
                return None
        return group

    def mid_step(self) -> bool:
        """Whether some pass of this step has arrived."""
        return any(v != self.passes for v in self.left.values())

    def refuse_zero_grad(self, reducing=False):
        """``zero_grad()`` between a backward pass and ``step()`` (or while a reduction is in
        flight) would race with the reduction: refused, as Horovod does."""
        if reducing or self.mid_step():
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")

    def too_many(self, name):
        n = self.passes
        raise GradientAccumulationError(
            f"Gradient of parameter '{name}' was computed more than "
            f"backward_passes_per_step={n} time{'s' if n != 1 else ''} before "
            f"optimizer.step(). Call optimizer.step() (or synchronize()) after every "
            f"{n} backward pass{'es' if n != 1 else ''}, or increase "
            f"backward_passes_per_step to accumulate more gradients locally.")
