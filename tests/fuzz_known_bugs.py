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

import json
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


def _statistics(args: tuple) -> tuple[object, BaseException | None]:
    """What ``json.loads`` makes of a container_statistics report, or what it raised."""
    try:
        return json.loads(args[1] or "[]"), None
    except (ValueError, RecursionError) as exc:
        return None, exc


def _json_depth(text: str) -> int:
    """How deep arrays and objects nest in ``text`` (brackets in strings not counted).

    Measured, not tried: whether ``json.loads`` runs out of recursion depends on the
    stack of the process trying and its recursion limit, which Hypothesis raises
    while it runs a test; a master parses at the default limit."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _statistics_nested_too_deep(method: str, args: tuple) -> bool:
    # Well below the default recursion limit (1000), less what the master's stack uses.
    return method == "container_statistics" and _json_depth(args[1] or "") >= 500


def _statistics_not_json(method: str, args: tuple) -> bool:
    if method != "container_statistics":
        return False
    try:
        json.dumps(_statistics(args)[0], allow_nan=False)
    except ValueError:
        return True
    return False


KNOWN_BUGS: dict[str, Callable[[str, tuple], bool]] = {
    "test_reregistering_agent_repeating_an_executor_leaks_its_resources": _repeats_an_executor,
    "test_reregistering_agent_reporting_more_than_it_has_makes_resources_up": _reports_more_than_it_has,
    "test_container_statistics_nested_too_deep_are_dropped": _statistics_nested_too_deep,
    "test_container_statistics_with_nan_leave_the_state_json": _statistics_not_json,
}


def known_bug(method: str, args: tuple) -> str | None:
    """The regression test of the known bug this Master call would trigger, if any."""
    return next((name for name, hits in KNOWN_BUGS.items() if hits(method, args)), None)
