"""Entry point of mezzo-isolator-netbw: registers the ``network/bandwidth`` isolator.
Installing it switches nothing on; ``[agent] isolation = [..., "network/bandwidth"]`` does."""

import mezzo

from .isolator import NetBandwidthIsolator


@mezzo.hookimpl
def mezzo_register_components(registry):
    registry.add(NetBandwidthIsolator)
