"""Entry point of mezzo-allocator-drf: registers the ``drf`` allocator. Installing it
switches nothing on; ``[master.allocator] name = "drf"`` does."""

import mezzo

from .allocator import DRFAllocator


@mezzo.hookimpl
def mezzo_register_components(registry):
    registry.add(DRFAllocator)
