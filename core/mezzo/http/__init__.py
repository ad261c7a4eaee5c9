"""The HTTP API of mezzo's daemons, served at their Thrift port (issue 16).

- :mod:`.link`: how an HTTP connection shares the port and its bounds with Thrift's.
- :mod:`.server`: an aiohttp application served through those links, with JSON errors.
- :mod:`.master_api`: the master's endpoints, in the shape Apache Mesos' tools expect.
- :mod:`.credentials`: HTTP Basic credentials, a principal for callers without a certificate.
- :mod:`.scheduler_api` and :mod:`.call_lane`: Mesos' v1 scheduler API (and its fast lane).
- :mod:`.metrics`: the master's counters under Mesos' metric names, and as Prometheus text.
"""
