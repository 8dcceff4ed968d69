"""The elastic workers' host changes: rewrite what the test's discovery script prints.

The script prints OUT.hosts; a worker rewrites it mid-training and waits until hvdlite-run
has read it (the hosts file's version moved), so that the next commit applies the change.
"""
import os
import time

from hvdlite.contract import membership

SEEN_TIMEOUT = 60   # seconds for hvdlite-run (polling every second) to pick the change up


def change_hosts(out, new_hosts):
    """new_hosts: "host:slots,host:slots"."""
    with open(out + ".hosts.tmp", "w") as f:
        f.write(new_hosts.replace(",", "\n") + "\n")
    os.replace(out + ".hosts.tmp", out + ".hosts")
    deadline = time.time() + SEEN_TIMEOUT
    while time.time() < deadline:
        found = membership.read_hosts()
        if found is not None and found.version > 0:
            return
        time.sleep(0.05)
    raise RuntimeError(f"hvdlite-run did not pick up the new hosts in {SEEN_TIMEOUT} s")
