"""A link with a fixed one-way delay between two namespace hosts, in user space.

The kernel's netem qdisc would add the delay on a veth link, but some kernels lack it (see
hosts.py). Instead each host gets a TAP device (``dl0``), and this process forwards every
Ethernet frame from one host's TAP to the other's after ``delay_ms``, in both directions.
Frames keep their order; none is dropped unless the receiving device's queue is full. Python forwards some tens of thousands of frames
a second, so the link suits latency-bound traffic (small messages), not bandwidth tests.

    python delay_line.py HOLDER_PID_A HOLDER_PID_B DELAY_MS

(HOLDER_PID_*: a process in each host's network namespace.) It prints ``ready`` once both
devices are attached, and runs until killed.
"""
import ctypes
import fcntl
import heapq
import os
import select
import struct
import sys
import time

DEVICE = "dl0"
_CLONE_NEWNET = 0x40000000
_TUNSETIFF = 0x400454CA
_IFF_TAP, _IFF_NO_PI = 0x0002, 0x1000


def attach(holder_pid: int) -> int:
    """An fd on the TAP device ``dl0`` of the network namespace ``holder_pid`` is in."""
    libc = ctypes.CDLL(None, use_errno=True)
    ns = os.open(f"/proc/{holder_pid}/ns/net", os.O_RDONLY)
    try:
        if libc.setns(ns, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into the namespace of {holder_pid}")
    finally:
        os.close(ns)
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", DEVICE.encode(), _IFF_TAP | _IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


def forward(fds, delay: float) -> None:
    """Copy each frame read from fds[i] to fds[1 - i], ``delay`` seconds after it arrived."""
    due = []     # (time, sequence, destination fd, frame): the sequence keeps the order
    sequence = 0
    while True:
        timeout = max(0.0, due[0][0] - time.monotonic()) if due else None
        readable, _, _ = select.select(fds, [], [], timeout)
        now = time.monotonic()
        for fd in readable:
            while True:
                try:
                    frame = os.read(fd, 65536)
                except BlockingIOError:
                    break
                other = fds[1] if fd == fds[0] else fds[0]
                heapq.heappush(due, (now + delay, sequence, other, frame))
                sequence += 1
        while due and due[0][0] <= time.monotonic():
            _, _, fd, frame = heapq.heappop(due)
            try:
                os.write(fd, frame)
            except BlockingIOError:
                pass   # the device's queue is full: dropped, as a congested link would
            except OSError:
                pass   # EIO: the other side's device is not up yet: dropped, as a dead link would


def run_before_busy_ranks() -> None:
    """Real-time priority, where allowed: MPI ranks poll their sockets without sleeping, and on
    a machine with fewer cores than ranks a forwarder at normal priority waits for a time slice
    (several ms) before each frame, which would swamp the delay it is meant to add."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (AttributeError, PermissionError, OSError):
        pass


def main() -> None:
    holder_a, holder_b, delay_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    run_before_busy_ranks()
    fds = [attach(holder_a), attach(holder_b)]
    print("ready", flush=True)
    forward(fds, delay_ms / 1000.0)


if __name__ == "__main__":
    main()
