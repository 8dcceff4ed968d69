"""Every HVDLITE_* setting, documented once. The C++ core reads them at ``init()``
(csrc/config.cc); ``hvdlite-run`` forwards them to every rank.

==================================  ========  ==============================================
Variable                            Default   Meaning
==================================  ========  ==============================================
HVDLITE_FUSION_THRESHOLD            67108864  Bytes of all-reduce data packed into one fusion
                                              buffer before it is reduced. 0 disables fusion.
HVDLITE_CYCLE_TIME                  0.25      Milliseconds: the longest the background thread
                                              sleeps between polls while it waits for other
                                              ranks. It never sleeps when it has nothing to do
                                              (it blocks) or when peers answer within 100 us.
HVDLITE_CACHE_CAPACITY              1024      Responses remembered so repeated tensors skip the
                                              coordinator (one bit each per round). 0 disables.
HVDLITE_RING_PIECE_BYTES            262144    Size of the pieces a ring step is cut into, so
                                              reducing one overlaps receiving the next
                                              (at most 1 GiB).
HVDLITE_STALL_CHECK_TIME_SECONDS    60        Warn when a request waits this long for other
                                              ranks. 0 disables.
HVDLITE_LOG_LEVEL                   (unset)   ``debug`` prints every collective as it runs.
HVDLITE_ABORT_ON_ERROR              1         An unhandled Python exception on one rank aborts
                                              the whole job (after printing the traceback).
HVDLITE_DYNAMIC_PROCESS_SETS        0         1 allows add_process_set / remove_process_set
                                              after init() (alias HOROVOD_DYNAMIC_PROCESS_SETS).
HVDLITE_HIERARCHICAL_ALLREDUCE      (auto)    Hierarchical all-reduce (within hosts, across
                                              hosts, within hosts) wherever several hosts hold
                                              the same number (>1) of ranks; 0 forbids it, 1
                                              asks for it. Must agree on every rank.
HVDLITE_TEST_MAX_TRANSFER_BYTES     2^31-1    For tests only: the largest byte count given to
                                              one MPI collective call (MPI's int limit).
                                              Larger allgathers, alltoalls and broadcasts go
                                              in pieces; lowering it runs that path on small
                                              tensors. Never needed in real jobs.
==================================  ========  ==============================================

All ranks must use the same values for HVDLITE_FUSION_THRESHOLD, HVDLITE_CACHE_CAPACITY,
HVDLITE_RING_PIECE_BYTES and HVDLITE_TEST_MAX_TRANSFER_BYTES (init() checks).
"""

SETTINGS = {
    "HVDLITE_FUSION_THRESHOLD": "64 MiB",
    "HVDLITE_CYCLE_TIME": "0.25",
    "HVDLITE_CACHE_CAPACITY": "1024",
    "HVDLITE_RING_PIECE_BYTES": "256 KiB",
    "HVDLITE_STALL_CHECK_TIME_SECONDS": "60",
    "HVDLITE_LOG_LEVEL": "",
    "HVDLITE_ABORT_ON_ERROR": "1",
    "HVDLITE_DYNAMIC_PROCESS_SETS": "0",
    "HVDLITE_HIERARCHICAL_ALLREDUCE": "",
    "HVDLITE_TEST_MAX_TRANSFER_BYTES": "2147483647",
}
