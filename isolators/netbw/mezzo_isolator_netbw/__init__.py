"""mezzo-isolator-netbw: the ``network/bandwidth`` isolator (see :mod:`.isolator`)."""

from .isolator import RESOURCE, NetBandwidthIsolator

__all__ = ["RESOURCE", "NetBandwidthIsolator"]
