"""A c10d group's timeout, and the error past it.

Note [group timeouts]
As gloo's, a group's timeout bounds every wait for one of its collectives (blocking calls, and
Work.wait() without a timeout of its own): past it the caller gets an error instead of waiting
forever for ranks that never submit the call. The request stays in flight in the engine, and
completes if they do submit it later.
"""

import datetime


def seconds(timeout):
    """Seconds of a c10d timeout (a timedelta or a number), None where it is unset (c10d's
    kUnsetTimeout is -1 ms), zero or none."""
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    return float(timeout) if float(timeout) > 0 else None


def timed_out(error_type, what, limit):
    """``error_type`` (the adapter's timeout error) for ``what`` outliving ``limit`` seconds."""
    return error_type(
        f"{what}: Timed out waiting {round(limit * 1000)}ms (the group's timeout) for the "
        f"other ranks to submit it; the request is still in flight and completes if they do")
