"""The lines ranks write on stderr for hvdlite-run to read (the launcher's output router
parses them; the rank guard and hvdlite.elastic write them)."""

EXIT_MARKER = "hvdlite-run-rank-exit:"
START_MARKER = "hvdlite-run-rank-start:"   # an elastic job added this rank
LEAVE_MARKER = "hvdlite-run-rank-leave:"   # written by hvdlite.elastic: its host was removed
# Written by an elastic job's new rank 0 after a loss: "<marker> ranks=1,4" (launcher's
# numbers), for ranks whose guard could not report (a vanished host) or whose report was lost.
LOST_MARKER = "hvdlite-run-ranks-lost:"
