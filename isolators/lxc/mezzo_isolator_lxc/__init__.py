"""mezzo-isolator-lxc: the ``lxc`` isolator, which runs each container as an LXC
application container (Debian's ``lxc`` package, ``lxc-execute``) with cpu and memory
limits.

- :class:`LxcIsolator`: the component, selected with ``[agent] isolation = ["lxc"]``.
- :mod:`.lxc_config`: the config and stop hook each container is started from.
- :mod:`.cgroups`: the cgroups lxc makes for a container, read and removed from the host.
"""

from .isolator import LxcIsolator

__all__ = ["LxcIsolator"]
