"""Stream mpirun's ``--output tag`` output with clean ``[rank]:`` prefixes; explain failures.

Open MPI 5 run with ``--output tag`` writes every line a rank prints as
``[<jobid>,<rank>]<stdout>: text`` (``<stderr>`` on mpirun's stderr). :class:`OutputRouter`
rewrites those to ``[rank]: text`` line by line, keeps the last lines of every rank, and
copies mpirun's own (untagged) messages through unchanged while remembering them, so that
:func:`failure_summary` can tell which rank failed first and show that rank's last output.
"""

import collections
import re
import threading
from typing import Dict, List, Optional, Tuple

# [jobid,rank]<stdout>: ; the single space after the colon belongs to the tag.
_TAG = re.compile(rb"\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>: ?")

# Open MPI's help-message frame: a line of dashes (74 in 5.0.x).
_FRAME = re.compile(rb"^-{20,}\s*$")

TAIL_KEEP = 400       # lines kept per rank (the summary shows the last SUMMARY_LINES of them)
SUMMARY_LINES = 20
SUMMARY_LINE_CHARS = 2000   # longer lines are cut in the summary (they were shown in full live)


class OutputRouter:
    """Parses tagged mpirun output; thread-safe across one reader thread per stream."""

    def __init__(self, prefix: bool = True, tail_keep: int = TAIL_KEEP):
        self.prefix = prefix
        self._tail_keep = tail_keep
        self._lock = threading.Lock()
        self.tails: Dict[int, collections.deque] = {}
        self.mpirun_lines: List[bytes] = []   # untagged lines: mpirun's own messages

    # -- parsing ---------------------------------------------------------------------------
    @staticmethod
    def split_line(line: bytes) -> List[Tuple[Optional[int], bytes]]:
        """Split one physical line (no trailing newline) into (rank or None, text) pieces.

        A rank that exits without a final newline gets the next tag (or mpirun's next
        message) glued onto its last line; such lines are split at every tag.
        """
        pieces = []
        matches = list(_TAG.finditer(line))
        if not matches:
            return [(None, line)]
        if matches[0].start() > 0:
            pieces.append((None, line[:matches[0].start()]))
        for i, m in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
            text = line[m.end():end]
            rank = int(m.group(2))
            # mpirun's framed help text may be glued to a last line without a newline.
            if i + 1 == len(matches):
                k = text.find(b"-" * 40)
                if k > 0 and _FRAME.match(text[k:]):
                    pieces.append((rank, text[:k]))
                    pieces.append((None, text[k:]))
                    continue
            pieces.append((rank, text))
        return pieces

    def _record(self, rank: Optional[int], stream: str, text: bytes) -> None:
        with self._lock:
            if rank is None:
                self.mpirun_lines.append(text)
                if len(self.mpirun_lines) > 2000:
                    del self.mpirun_lines[:1000]
            else:
                tail = self.tails.get(rank)
                if tail is None:
                    tail = self.tails[rank] = collections.deque(maxlen=self._tail_keep)
                tail.append((stream, text))

    def format_piece(self, rank: Optional[int], text: bytes) -> bytes:
        if rank is None or not self.prefix:
            return text + b"\n"
        return b"[%d]: " % rank + text + b"\n"

    def pump(self, src, dst, stream: str) -> None:
        """Copy binary file ``src`` to binary file ``dst`` line by line until EOF."""
        for raw in iter(src.readline, b""):
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if line.endswith(b"\r"):
                line = line[:-1]
            out = []
            for rank, text in self.split_line(line):
                if rank is not None and text == b"\x00":
                    continue   # Open MPI sends a lone NUL on a rank's stderr when it aborts
                self._record(rank, stream, text)
                out.append(self.format_piece(rank, text))
            try:
                dst.write(b"".join(out))
                dst.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass   # our own stdout went away (e.g. `| head`); keep draining mpirun

    # -- failure analysis ------------------------------------------------------------------
    def failed_rank(self) -> Tuple[Optional[int], str]:
        """(rank, how) of the first failing process as reported by mpirun, else (None, '')."""
        with self._lock:
            text = b" ".join(self.mpirun_lines).decode("utf-8", "replace")
            rank_texts = {r: b"\n".join(t for _, t in tail).decode("utf-8", "replace")
                          for r, tail in self.tails.items()}
        text = " ".join(text.split())
        m = re.search(r"Process name:\s*\[[^\]]*?(\d+),(\d+)\]\s*Exit code:\s*(-?\d+)", text)
        if m:
            return int(m.group(2)), f"exited with code {m.group(3)}"
        m = re.search(r"process rank (\d+) with PID \S+ on node \S+ exited on signal (\d+)"
                      r"(?: \(([^)]*)\))?", text)
        if m:
            name = f" ({m.group(3)})" if m.group(3) else ""
            return int(m.group(1)), f"was killed by signal {m.group(2)}{name}"
        m = re.search(r'process rank (\d+) with PID \S+ on node \S+ calling "abort"', text)
        if m:
            rank = int(m.group(1))
            code = re.search(r"MPI_ABORT was invoked on rank %d\b.*?Errorcode:\s*(-?\d+)" % rank,
                             " ".join(rank_texts.get(rank, "").split()))
            how = "called MPI_Abort" + (f" with error code {code.group(1)}" if code else "")
            return rank, how
        m = re.search(r"process rank (\d+) with PID", text)
        if m:
            return int(m.group(1)), "failed"
        # The abort banner a rank prints itself, in case mpirun's message was lost.
        for rank in sorted(rank_texts):
            code = re.search(r"MPI_ABORT was invoked on rank (\d+)\b.*?Errorcode:\s*(-?\d+)",
                             " ".join(rank_texts[rank].split()))
            if code:
                return int(code.group(1)), f"called MPI_Abort with error code {code.group(2)}"
        return None, ""

    def last_output(self, rank: int, n: int = SUMMARY_LINES) -> List[Tuple[str, bytes]]:
        """The rank's last ``n`` lines, without Open MPI's MPI_ABORT boilerplate frame."""
        with self._lock:
            lines = list(self.tails.get(rank, ()))
        kept, frame, in_frame = [], [], False
        for stream, text in lines:
            if _FRAME.match(text):
                if in_frame:
                    body = b" ".join(t for _, t in frame)
                    if b"MPI_ABORT was invoked" not in body:
                        kept.extend(frame)
                        kept.append((stream, text))
                    frame, in_frame = [], False
                else:
                    frame, in_frame = [(stream, text)], True
                continue
            if in_frame:
                frame.append((stream, text))
            else:
                kept.append((stream, text))
        kept.extend(frame)   # an unterminated frame is shown as is
        while kept and not kept[-1][1].strip():
            kept.pop()
        return kept[-n:]


def _launch_failure(router: OutputRouter) -> Optional[str]:
    """mpirun's reason when it could not start the ranks at all, in one line."""
    text = " ".join(b" ".join(router.mpirun_lines).decode("utf-8", "replace").split())
    m = re.search(r"unable to find the specified executable.*?Executable:\s*(\S+)", text)
    if m:
        return f"mpirun could not find the program {m.group(1)!r} (check the command and PATH on every host)"
    if "not enough slots available" in text:
        return "mpirun found too few slots for -np (see above)"
    return None


def failure_summary(router: OutputRouter, returncode: int) -> bytes:
    """Text explaining a failed job: the first failing rank and its last output."""
    launch_error = _launch_failure(router)
    if launch_error:
        return b"hvdlite-run: %s; mpirun exited with code %d\n" % (launch_error.encode(), returncode)
    rank, how = router.failed_rank()
    out = []
    if rank is None:
        out.append(b"hvdlite-run: mpirun exited with code %d" % returncode)
        # No rank was named: show ranks whose output ends in a Python traceback or error.
        suspects = [r for r in sorted(router.tails)
                    if any(b"Traceback" in t or b"Error" in t for _, t in router.last_output(r))]
        if not suspects:
            out.append(b"; no rank reported an error (see mpirun's messages above)\n")
            return b"".join(out)
        out.append(b"; ranks with errors in their output: %s\n"
                   % ", ".join(map(str, suspects)).encode())
        ranks = suspects[:2]
    else:
        ranks = [rank]
        out.append(b"hvdlite-run: rank %d %s" % (rank, how.encode()))
    for r in ranks:
        lines = router.last_output(r)
        if rank is not None:
            out.append(b"; its last output:\n" if lines else b"; it printed nothing\n")
        else:
            out.append(b"hvdlite-run: last output of rank %d:\n" % r)
        for _, text in lines:
            if len(text) > SUMMARY_LINE_CHARS:
                text = text[:SUMMARY_LINE_CHARS] + b" ... [%d more bytes]" % (len(text) - SUMMARY_LINE_CHARS)
            out.append(b"[%d]: " % r + text + b"\n")
    return b"".join(out)
