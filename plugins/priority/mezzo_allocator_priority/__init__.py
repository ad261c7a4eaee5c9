"""mezzo-allocator-priority: the ``strict-priority`` allocator component.

:class:`StrictPriorityAllocator` serves frameworks by priority level (higher first)
and by weighted DRF within a level, reusing the sorter of ``mezzo-allocator-drf``.
"""

from .allocator import StrictPriorityAllocator

__all__ = ["StrictPriorityAllocator"]
