"""Entry point of mezzo-isolator-lxc: registers the ``lxc`` isolator. Installing it
switches nothing on; listing it in ``agent.isolation`` does."""

import mezzo

from .isolator import LxcIsolator


@mezzo.hookimpl
def mezzo_register_components(registry):
    registry.add(LxcIsolator)
