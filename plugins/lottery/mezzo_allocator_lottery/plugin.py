"""Entry point of mezzo-allocator-lottery: registers the ``lottery`` allocator.
Installing it switches nothing on; ``[master.allocator] name = "lottery"`` does."""

import mezzo

from .allocator import LotteryAllocator


@mezzo.hookimpl
def mezzo_register_components(registry):
    registry.add(LotteryAllocator)
