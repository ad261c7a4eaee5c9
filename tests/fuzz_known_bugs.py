"""Master calls that trigger a bug the fuzzers found and that is not fixed yet.

The fuzzers (``tests/unit/test_fuzz_master_service.py``, ``tests/test_fuzz_services.py``)
do not send such a call, so that they keep looking for other bugs instead of finding
the same one on every run. Each entry is named after its regression test in
``tests/unit/test_fuzz_master_service.py``, marked ``xfail(strict=True)``: once the bug
is fixed that test passes, so fails as an unexpected pass, and the fix removes its
xfail mark and its entry here, which lets the fuzzers send such calls again.

Each predicate takes a call of the Master service as a handler receives it
(``method``, decoded positional arguments) and says whether it would trigger its bug.
Predicates err on the side of skipping: a call that might trigger the bug is skipped.
"""

from __future__ import annotations

from collections.abc import Callable

KNOWN_BUGS: dict[str, Callable[[str, tuple], bool]] = {}


def known_bug(method: str, args: tuple) -> str | None:
    """The regression test of the known bug this Master call would trigger, if any."""
    return next((name for name, hits in KNOWN_BUGS.items() if hits(method, args)), None)
