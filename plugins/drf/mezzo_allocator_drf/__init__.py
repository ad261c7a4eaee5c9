"""mezzo-allocator-drf: the ``drf`` allocator component (weighted Dominant Resource Fairness).

- :class:`DRFAllocator`: the component the operator selects with
  ``[master.allocator] name = "drf"``.
- :class:`DRFSorter`: the incremental weighted-dominant-share order it is built on,
  public so other allocators (``strict-priority``) reuse it instead of copying it.
- :class:`Weights`: the ``roles`` / ``frameworks`` weight tables and their validation.
- :class:`Guarantees`: the ``guarantees`` table (fractions of the cluster) and its fit check.
"""

from .allocator import DRFAllocator
from .sorter import DRFSorter
from .weights import Guarantees, Weights

__all__ = ["DRFAllocator", "DRFSorter", "Guarantees", "Weights"]
