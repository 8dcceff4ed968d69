"""Stream mpirun's rank-tagged output as ``[rank]: text`` and explain a failed job.

:class:`OutputRouter` reads mpirun's stdout and stderr (one thread each), rewrites each MPI's
rank tag (see :mod:`.dialect`) to ``[rank]: ``, drops stray NUL bytes, and records:

* the last lines of every rank, and mpirun's own (untagged) messages;
* each rank's first Python error (the exception line that ends a traceback);
* when and how each rank's program ended (the guard's exit line, see :mod:`.rank_guard`).

From these :func:`failure_summary` names the rank that failed (or left) first and shows its own
output. Unless ``verbose``, it also keeps the noise down while streaming: MPI's framed help
boxes that the summary explains (MPI_ABORT, "exited due to", Hydra's BAD TERMINATION) are
dropped, and a traceback that repeats another rank's error, or that only reports the job being
shut down under it, is shown as its last line.
"""

import collections
import itertools
import re
import threading
from typing import Dict, List, Optional, Pattern, Tuple

from hvdlite.contract.markers import (ABORT_MARKER, EXIT_MARKER, LEAVE_MARKER, LOST_MARKER,
                                      START_MARKER)

from .dialect import OpenMPI

TAIL_KEEP = 400       # lines kept per rank (the summary shows the last SUMMARY_LINES of them)
SUMMARY_LINES = 20
SUMMARY_LINE_CHARS = 2000   # longer lines are cut in the summary (they were shown in full live)

# Open MPI's help-message frame: a line of dashes (74 in 5.0.x); Hydra frames with '='.
_FRAME = re.compile(rb"^(?:-{20,}|={20,})\s*$")
_EXIT = re.compile(re.escape(EXIT_MARKER).encode() +
                   rb" rank=(\S+) code=(\d+) signal=(\d+) time=([\d.]+)")
_TRACEBACK = b"Traceback (most recent call last):"
_EXCEPTION = re.compile(rb"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b.*|"
                        rb"[A-Za-z_][\w.]*: .*)$")
_ERROR_LINE = re.compile(rb"^[A-Za-z_][\w.]*(?:Error|Exception)\b: ")
# Errors a rank gets because another rank left or failed: never the root cause.
_CONSEQUENCES = (b"HvdliteShutdownError", b"hvdlite has been shut down", b"hvdlite stopped",
                 b"MPI_ERR_PROC_FAILED", b"ProcessFailed")
# Boxes whose news the summary gives; other boxes are always shown.
_EXPLAINED_BOXES = (b"MPI_ABORT was invoked", b"has exited due to process rank",
                    b"exited with non-zero status", b"BAD TERMINATION OF ONE OF YOUR",
                    b"noticed that process rank", b"YOU CAN IGNORE THE BELOW CLEANUP")
_LEFT = re.compile(rb"shut down: ranks? ([\d, ]+?) called")
# The stall inspector names ranks that did not answer it (stopped, e.g. by SIGSTOP, or stuck).
_SILENT = re.compile(rb"\(ranks? ([\d, ]+?) (?:does|do) not answer")
_HYDRA_ABORT = re.compile(rb"^Abort\(-?\d+\) on node \d+ \(rank (\d+) in comm \d+\): "
                          rb"application called MPI_Abort")
_HYDRA_TRAILER = (b"YOUR APPLICATION TERMINATED WITH THE EXIT STRING",
                  b"This typically refers to a problem with your application.",
                  b"Please see the FAQ page for debugging suggestions")

_TEARDOWN_SIGNALS = (9, 15)   # SIGKILL, SIGTERM
Exit = collections.namedtuple("Exit", "seq code signal time")
Error = collections.namedtuple("Error", "seq line consequence")


class OutputRouter:
    """Parses tagged mpirun output; thread-safe across one reader thread per stream."""

    def __init__(self, tag: Optional[Pattern[bytes]] = None, prefix: bool = True,
                 verbose: bool = False, size: int = 0, chunked_tags: bool = False,
                 tail_keep: int = TAIL_KEEP):
        self.tag = tag if tag is not None else OpenMPI.tag
        self.prefix = prefix
        self.verbose = verbose
        self.size = size   # number of ranks, when known
        self.on_exit = None   # called with (rank, Exit) when a rank's program has ended
        # Elastic jobs: called with the rank when an added rank starts / a rank leaves because
        # its host was removed (markers from the guard and from hvdlite.elastic).
        self.on_start = None
        self.on_leave = None
        self.on_lost_report = None   # called with the ranks the survivors found lost
        self.on_abort = None   # called with the rank when hvdlite's error hook aborts the job
        # Hydra tags each chunk a rank writes, not each line: a line may arrive in pieces,
        # with other ranks' chunks between them.
        self.chunked_tags = chunked_tags
        self._partial: Dict[Tuple[int, str], bytes] = {}
        self._tail_keep = tail_keep
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self.tails: Dict[int, collections.deque] = {}
        self.mpirun_lines: List[bytes] = []   # untagged lines: mpirun's own messages
        self.exits: Dict[int, Exit] = {}
        self.errors: Dict[int, Error] = {}
        # Held back while streaming: an open box (per source) and an open traceback (per rank).
        self._box: Dict[Tuple[Optional[int], str], List[Tuple[Optional[int], bytes]]] = {}
        self._traceback: Dict[int, List[bytes]] = {}
        self._shown_errors: Dict[bytes, int] = {}

    # -- parsing ---------------------------------------------------------------------------
    def split_line(self, line: bytes) -> List[Tuple[Optional[int], bytes]]:
        """Split one physical line (no newline) into (rank or None, text) pieces.

        A rank that exits without a final newline gets the next tag (or mpirun's next
        message) glued onto its last line; such lines are split at every tag.
        """
        pieces = []
        matches = list(self.tag.finditer(line))
        if not matches:
            return [(None, line)]
        if matches[0].start() > 0:
            pieces.append((None, line[:matches[0].start()]))
        for i, m in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
            text = line[m.end():end]
            rank = int(m.group("rank"))
            # mpirun's framed help text may be glued to a last line without a newline.
            if i + 1 == len(matches):
                k = text.find(b"-" * 40)
                if k > 0 and _FRAME.match(text[k:]):
                    pieces.append((rank, text[:k]))
                    pieces.append((None, text[k:]))
                    continue
            if pieces and pieces[-1][0] == rank:
                # Hydra tags every chunk a rank writes, also a line's continuation
                # ("[1]<hvdl>: text[1]<hvdl>: \n" for a print in unbuffered Python).
                pieces[-1] = (rank, pieces[-1][1] + text)
            else:
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

    # -- streaming -------------------------------------------------------------------------
    def pump(self, src, dst, stream: str) -> None:
        """Copy binary file ``src`` to binary file ``dst`` line by line until EOF."""
        for raw in iter(src.readline, b""):
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if line.endswith(b"\r"):
                line = line[:-1]
            # Open MPI sometimes sends a NUL byte with an aborting rank's stderr.
            line = line.replace(b"\x00", b"")
            out = []
            pieces = self.split_line(line)
            for i, (rank, text) in enumerate(pieces):
                if rank is not None and (rank, stream) in self._partial:
                    text = self._partial.pop((rank, stream)) + text
                if self.chunked_tags and rank is not None and i + 1 < len(pieces) \
                        and pieces[i + 1][0] not in (None, rank):
                    # Another rank's chunk came before this line's end: wait for the rest.
                    self._partial[(rank, stream)] = text
                    continue
                out.extend(self._route(rank, stream, text))
            self._write(dst, out)
        out = []
        for key in [k for k in self._partial if k[1] == stream]:
            out.extend(self._route(key[0], stream, self._partial.pop(key)))
        self._write(dst, out + self._flush_held(stream))

    @staticmethod
    def _write(dst, pieces: List[bytes]) -> None:
        if not pieces:
            return
        try:
            dst.write(b"".join(pieces))
            dst.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass   # our own stdout went away (e.g. `| head`); keep draining mpirun

    def _route(self, rank: Optional[int], stream: str, text: bytes) -> List[bytes]:
        """Record one piece; return what to print now (possibly nothing, or held lines)."""
        if rank is not None:
            for marker, callback in ((START_MARKER, self.on_start), (LEAVE_MARKER, self.on_leave),
                                     (ABORT_MARKER, self.on_abort)):
                if text.startswith(marker.encode()):
                    if callback is not None:
                        callback(rank)
                    return []
            if text.startswith(LOST_MARKER.encode()):
                ranks = text[len(LOST_MARKER):].strip().partition(b"=")[2]
                if self.on_lost_report is not None:
                    self.on_lost_report([int(r) for r in ranks.split(b",") if r.strip().isdigit()])
                return []
            k = text.find(EXIT_MARKER.encode())
            if k >= 0:
                self._note_exit(rank, text[k:])
                text = text[:k]
                if not text:
                    return []
        self._record(rank, stream, text)
        if self.verbose:
            return [self.format_piece(rank, text)]
        if rank is not None and stream == "stderr" and not (
                (rank, stream) in self._box or _FRAME.match(text)):
            held = self._traceback_step(rank, text)
            if held is not None:
                return held
            if _HYDRA_ABORT.match(text):
                return []   # the summary says which rank aborted
            if _ERROR_LINE.match(text):   # an error outside a (whole) traceback
                self._note_error(rank, text)
        return self._box_step(rank, stream, text)

    def _box_step(self, rank, stream, text) -> List[bytes]:
        key = (rank, stream)
        box = self._box.get(key)
        if box is None:
            if rank is None and any(t in text for t in _HYDRA_TRAILER):
                return []
            if _FRAME.match(text):
                self._box[key] = [(rank, text)]
                return []
            return [self.format_piece(rank, text)]
        box.append((rank, text))
        if not _FRAME.match(text) and len(box) < 60:
            return []
        del self._box[key]
        body = b" ".join(t for _, t in box)
        if any(marker in body for marker in _EXPLAINED_BOXES):
            return []
        return [self.format_piece(r, t) for r, t in box]

    def _traceback_step(self, rank: int, text: bytes) -> Optional[List[bytes]]:
        """Hold a traceback until its exception line, then show it whole or as one line."""
        lines = self._traceback.get(rank)
        if lines is None:
            if text.strip() != _TRACEBACK:
                return None
            self._traceback[rank] = [text]
            return []
        lines.append(text)
        # Open MPI 4 may break a long line where a chunk ended: a bare "^^^" marker line
        # still belongs to the traceback.
        if not text.strip(b" ^~") or text[:1].isspace() or text.startswith(
                (b"During handling", b"The above exception")):
            return [] if len(lines) < 400 else self._release(rank, None)
        if text.strip() == _TRACEBACK:
            return []
        # The first line at the left margin ends it: normally the exception line.
        return self._release(rank, text if _EXCEPTION.match(text) else None)

    def _release(self, rank: int, exception: Optional[bytes]) -> List[bytes]:
        lines = self._traceback.pop(rank)
        if exception is None:
            return [self.format_piece(rank, t) for t in lines]
        consequence = self._note_error(rank, exception)
        with self._lock:
            first = self._shown_errors.setdefault(exception, rank)
        if first != rank:
            return [self.format_piece(rank, exception + b"  (the same error as rank %d; "
                                      b"--verbose shows its traceback)" % first)]
        if consequence:
            return [self.format_piece(rank, exception + b"  (--verbose shows the traceback)")]
        return [self.format_piece(rank, t) for t in lines]

    def _note_error(self, rank: int, line: bytes) -> bool:
        """Remember the rank's first error (ordered as shown); True if it is a consequence."""
        consequence = any(c in line for c in _CONSEQUENCES)
        with self._lock:
            self.errors.setdefault(rank, Error(next(self._seq), line, consequence))
        return consequence

    def _flush_held(self, stream: str) -> List[bytes]:
        out = []
        for key in [k for k in self._box if k[1] == stream]:
            out += [self.format_piece(r, t) for r, t in self._box.pop(key)]
        if stream == "stderr":
            for rank in list(self._traceback):
                del self._traceback[rank]
                # The rank was ended while printing it (MPI killed it after another failed):
                # it had an error, but not the first (or it would have finished printing).
                with self._lock:
                    self.errors.setdefault(rank, Error(next(self._seq), b"(cut off)", True))
                out.append(self.format_piece(rank, b"(a traceback, cut off when the job "
                                             b"ended; --verbose shows it)"))
        return out

    def _note_exit(self, rank: int, text: bytes) -> None:
        m = _EXIT.match(text)
        if m:
            with self._lock:
                x = self.exits.setdefault(rank, Exit(next(self._seq), int(m.group(2)),
                                                     int(m.group(3)), float(m.group(4))))
            if self.on_exit is not None:
                self.on_exit(rank, x)

    # -- failure analysis ------------------------------------------------------------------
    def root_cause(self) -> Tuple[Optional[int], str]:
        """(rank, what happened) for the rank that failed or left first, else (None, '')."""
        with self._lock:
            exits = dict(self.exits)
            errors = dict(self.errors)
        # A real error, or a rank ending abnormally without one: the earliest is the cause.
        events = [(e.seq, r, "raised " + _short(e.line)) for r, e in errors.items()
                  if not e.consequence]
        events += [(x.seq, r, how_exited(x)) for r, x in exits.items()
                   if (x.code or x.signal not in (0, *_TEARDOWN_SIGNALS)) and r not in errors]
        # SIGTERM/SIGKILL are how MPI ends the other ranks: a cause only before any error.
        first_error = min((e.seq for e in errors.values()), default=None)
        events += [(x.seq, r, how_exited(x)) for r, x in exits.items()
                   if x.signal in _TEARDOWN_SIGNALS and r not in errors
                   and (first_error is None or x.seq < first_error)]
        if events:
            _, rank, how = min(events)
            x = exits.get(rank)
            if x is not None and x.code and how.startswith("raised"):
                how += f" and {how_exited(x)}"
            return rank, how
        # Only errors caused by a rank leaving: blame the rank that left. The core names it
        # ("shut down: rank 0 called hvdlite.shutdown() or exited"); else the rank that ended
        # cleanly first, or the one rank that printed no error.
        victims = sorted(r for r, e in errors.items() if e.consequence)
        if victims:
            then = (f"; rank{'s' if len(victims) > 1 else ''} "
                    f"{', '.join(map(str, victims))} then failed with "
                    f"{_short(errors[victims[0]].line, 120)}")
            first = min(victims, key=lambda r: errors[r].seq)
            named = _LEFT.search(errors[first].line)
            if named:
                rank = int(re.split(rb"[, ]+", named.group(1).strip())[0])
                return rank, ("called hvdlite.shutdown() or exited while other ranks still "
                              "waited for it" + then)
            silent = _SILENT.search(errors[first].line)
            if silent:
                rank = int(re.split(rb"[, ]+", silent.group(1).strip())[0])
                return rank, ("stopped answering (a stopped process, or one stuck outside "
                              "hvdlite) while other ranks waited for it" + then)
            clean = sorted((x.time, r) for r, x in exits.items() if not x.code and not x.signal)
            silent = sorted(set(range(self.size)) - set(errors)) if self.size else []
            if clean or len(silent) == 1:
                rank = clean[0][1] if clean else silent[0]
                how = "exited cleanly (code 0)" if clean else "left without an error"
                return rank, f"{how} while other ranks still waited for it" + then
            rank = min(victims, key=lambda r: errors[r].seq)
            return rank, "raised " + _short(errors[rank].line)
        return self.failed_rank()

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
        # The abort lines ranks print themselves (Open MPI's banner, Hydra's one-liner).
        for rank in sorted(rank_texts):
            flat = " ".join(rank_texts[rank].split())
            code = re.search(r"MPI_ABORT was invoked on rank (\d+)\b.*?Errorcode:\s*(-?\d+)", flat)
            if code:
                return int(code.group(1)), f"called MPI_Abort with error code {code.group(2)}"
            code = re.search(r"Abort\((-?\d+)\) on node \d+ \(rank (\d+) in comm", flat)
            if code:
                return int(code.group(2)), f"called MPI_Abort with error code {code.group(1)}"
        return None, ""

    def last_output(self, rank: int, n: int = SUMMARY_LINES) -> List[Tuple[str, bytes]]:
        """The rank's last ``n`` lines, without MPI's abort boilerplate."""
        with self._lock:
            lines = list(self.tails.get(rank, ()))
        kept, frame, in_frame = [], [], False
        for stream, text in lines:
            if _HYDRA_ABORT.match(text):
                continue
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


def _short(line: bytes, limit: int = 300) -> str:
    text = line.decode("utf-8", "replace").strip()
    return text if len(text) <= limit else text[:limit] + "..."


def how_exited(x: Exit) -> str:
    if x.signal:
        import signal as _signal
        try:
            name = f" ({_signal.Signals(x.signal).name})"
        except ValueError:
            name = ""
        return f"was killed by signal {x.signal}{name}"
    return f"exited with code {x.code}"


def _launch_failure(router: OutputRouter) -> Optional[str]:
    """mpirun's reason when it could not start the ranks at all, in one line."""
    text = " ".join(b" ".join(router.mpirun_lines).decode("utf-8", "replace").split())
    m = re.search(r"unable to find the specified executable.*?Executable:\s*(\S+)", text)
    if m:
        return f"mpirun could not find the program {m.group(1)!r} (check the command and PATH on every host)"
    m = re.search(r"\[proxy:[^\]]*\] HYDU_create_process.*?execvp error on file (\S+)", text)
    if m:
        return f"mpirun could not find the program {m.group(1)!r} (check the command and PATH on every host)"
    if "not enough slots available" in text:
        return "mpirun found too few slots for -np (see above)"
    return None


def failure_summary(router: OutputRouter, returncode: int) -> bytes:
    """Text explaining a failed job: the first failing rank, what it did, its last output."""
    launch_error = _launch_failure(router)
    if launch_error:
        return b"hvdlite-run: %s; mpirun exited with code %d\n" % (launch_error.encode(), returncode)
    rank, how = router.root_cause()
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
