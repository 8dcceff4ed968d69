"""Starting the launcher's background threads (also Horovod's ``horovod.runner.util.threads``)."""

import threading
from typing import Callable, Optional


def in_thread(target: Callable, args: tuple = (), name: Optional[str] = None,
              daemon: bool = True) -> threading.Thread:
    """Start ``target(*args)`` in a new thread and return the thread.

    A daemon thread by default: the launcher's helpers (output pumps, host watcher) must never
    keep the process alive after the job ended.
    """
    if not isinstance(args, tuple):
        # threading.Thread would only fail inside the new thread, far from the caller.
        raise TypeError(f"in_thread: args must be a tuple, got {type(args).__name__} "
                        f"(for one argument write (arg,))")
    thread = threading.Thread(target=target, args=args, name=name, daemon=daemon)
    thread.start()
    return thread
