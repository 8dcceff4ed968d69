"""The lines ranks write on stderr for hvdlite-run to read (the launcher's output router
parses them; the rank guard and hvdlite.elastic write them)."""

EXIT_MARKER = "hvdlite-run-rank-exit:"
START_MARKER = "hvdlite-run-rank-start:"   # an elastic job added this rank
LEAVE_MARKER = "hvdlite-run-rank-leave:"   # written by hvdlite.elastic: its host was removed
# Written by an elastic job's new rank 0 after a loss: "<marker> ranks=1,4" (launcher's
# numbers), for ranks whose guard could not report (a vanished host) or whose report was lost.
LOST_MARKER = "hvdlite-run-ranks-lost:"
# Written by hvdlite's error hook just before it aborts the job (MPI_Abort): "<marker> rank=R".
# The runtime's teardown after an abort can deadlock (Open MPI 5's prterun, in PMIx) before
# any guard reports an end; with this word hvdlite-run ends the job itself if it must.
ABORT_MARKER = "hvdlite-run-rank-abort:"
# Set to "1" by the rank guard for the program it runs: the program runs under hvdlite-run.
GUARDED_ENV = "HVDLITE_RANK_GUARD"
