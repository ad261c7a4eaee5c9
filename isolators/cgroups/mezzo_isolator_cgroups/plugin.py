"""Entry point of mezzo-isolator-cgroups: registers ``cgroups/cpu`` and ``cgroups/mem``.
Installing it switches nothing on; ``[agent] isolation = [..., "cgroups/cpu", "cgroups/mem"]`` does."""

import mezzo

from .cpu import CpuIsolator
from .mem import MemIsolator


@mezzo.hookimpl
def mezzo_register_components(registry):
    registry.add(CpuIsolator)
    registry.add(MemIsolator)
