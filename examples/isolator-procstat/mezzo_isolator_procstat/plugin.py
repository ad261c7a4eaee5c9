"""Entry point of mezzo-isolator-procstat: registers the ``example/procstat`` isolator.
Installing it switches nothing on; listing it in ``agent.isolation`` does."""

import mezzo

from .isolator import ProcStatIsolator


@mezzo.hookimpl
def mezzo_register_components(registry):
    registry.add(ProcStatIsolator)
