"""Entry point of mezzo-allocator-priority: registers the ``strict-priority`` allocator.
Installing it switches nothing on; ``[master.allocator] name = "strict-priority"`` does."""

import mezzo

from .allocator import StrictPriorityAllocator


@mezzo.hookimpl
def mezzo_register_components(registry):
    registry.add(StrictPriorityAllocator)
