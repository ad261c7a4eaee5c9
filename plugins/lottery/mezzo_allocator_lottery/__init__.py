"""mezzo-allocator-lottery: the ``lottery`` allocator component.

:class:`LotteryAllocator` offers each free agent to a framework drawn at random with
odds proportional to its weight (lottery scheduling, paper §4.3). It reuses the
weights and the share bookkeeping of ``mezzo-allocator-drf``.
"""

from .allocator import LotteryAllocator

__all__ = ["LotteryAllocator"]
