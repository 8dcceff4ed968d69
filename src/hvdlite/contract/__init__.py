"""What hvdlite-run and the ranks it starts agree on, below both ``runner/`` and ``elastic/``.

- :mod:`.markers`: the lines a rank's guard (or hvdlite.elastic) writes for the launcher;
- :mod:`.elastic_env`: the environment by which the launcher tells ranks a job is elastic;
- :mod:`.membership`: where an elastic job's ranks are and what a new host list asks of them.
"""
