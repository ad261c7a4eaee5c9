"""Linux cgroup isolators for mezzo agents: ``cgroups/cpu`` and ``cgroups/mem``.

Only :mod:`.v1` knows cgroup v1's files; the isolators (:mod:`.cpu`, :mod:`.mem`,
sharing :mod:`.base`) speak to it through a handful of functions, so a v2
backend can be added beside it.
"""

from .cpu import CpuIsolator
from .mem import MemIsolator
from .v1 import CgroupError, CgroupsUnavailable

__all__ = ["CgroupError", "CgroupsUnavailable", "CpuIsolator", "MemIsolator"]
