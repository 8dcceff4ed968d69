"""hvdlite.contract.markers: the rank guard (a script that runs without hvdlite on the path,
so it spells them out) writes the markers and reads the variable the launcher and
hvdlite.elastic agree on."""

from hvdlite.contract import elastic_env, markers
from hvdlite.runner import rank_guard


def test_the_guard_speaks_the_contract():
    assert rank_guard.EXIT_MARKER == markers.EXIT_MARKER
    assert rank_guard.START_MARKER == markers.START_MARKER
    assert rank_guard.ADDED_ID_ENV == elastic_env.WORKER_ID_ENV
    assert rank_guard.GUARDED_ENV == markers.GUARDED_ENV
