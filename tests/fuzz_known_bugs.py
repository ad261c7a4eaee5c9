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

from mezzo.resources import InvalidResources, Resources


def _readable(wire) -> Resources | None:
    try:
        return Resources.of(wire)
    except InvalidResources:
        return None


def _repeats_an_executor(method: str, args: tuple) -> bool:
    if method != "reregister_agent":
        return False
    keys = [(ex.framework_id, ex.executor_id) for ex in args[2] if ex is not None]
    return len(keys) != len(set(keys))


def _reports_more_than_it_has(method: str, args: tuple) -> bool:
    if method != "reregister_agent" or args[0] is None:
        return False
    info, tasks, executors, _ = args
    total = _readable(info.resources)
    if total is None:
        return False
    held = Resources()
    wire = [rt.task.resources for rt in tasks if rt is not None and rt.task is not None]
    for resources in wire + [ex.resources for ex in executors if ex is not None]:
        held = held + (_readable(resources) or Resources())
    return not held.fits_in(total)


KNOWN_BUGS: dict[str, Callable[[str, tuple], bool]] = {
    "test_reregistering_agent_repeating_an_executor_leaks_its_resources": _repeats_an_executor,
    "test_reregistering_agent_reporting_more_than_it_has_makes_resources_up": _reports_more_than_it_has,
}


def known_bug(method: str, args: tuple) -> str | None:
    """The regression test of the known bug this Master call would trigger, if any."""
    return next((name for name, hits in KNOWN_BUGS.items() if hits(method, args)), None)
