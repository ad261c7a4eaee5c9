"""The agent sends the master only finite container statistics: a measurement that
is NaN or an infinity (not JSON; the master drops a whole report that has one) is
dropped where the isolators' measurements are merged (``Containerizer.usage``), with
one warning per isolator and key."""

from __future__ import annotations

import json
import math

from agent_harness import (
    FRAMEWORK,
    ScriptedMaster,
    agent_config,
    command_task,
    run,
    running_agent,
    wait_until,
)
from structlog.testing import capture_logs

from mezzo.agent import statistics
from mezzo.agent.containerizer import Containerizer
from mezzo.hookspecs import Container, ContainerLaunch, Isolator, hookimpl
from mezzo.plugins import load_plugins
from mezzo.resources import Resources

MEASURED = {
    "cpu_seconds": 1.5,
    "threads": 3,
    "mem_bytes": math.nan,
    "net_limit_mbps": math.inf,
    "net_floor_mbps": -math.inf,
    "per_cpu": [0.5, math.nan],
    "pressure": {"some": 0.1, "full": math.inf},
    "label": "fine",
}
FINITE = {"cpu_seconds": 1.5, "threads": 3, "label": "fine"}


class _NonFinite(Isolator):
    """Measures some values that are not finite numbers."""

    name = "test/non-finite"

    async def usage(self, container):
        return dict(MEASURED)


class _Fine(Isolator):
    """Measures ``mem_bytes`` properly: a later isolator's NaN must not replace it."""

    name = "test/fine"

    async def usage(self, container):
        return {"mem_bytes": 4096.0}


class _Plugin:
    @hookimpl
    def mezzo_register_components(self, registry):
        registry.add(_NonFinite)


def _strict(text: str):
    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_measurements_are_dropped_and_logged_once_per_isolator_and_key(tmp_path):
    containerizer = Containerizer([_Fine({}, key="fine"), _NonFinite({}, key="non-finite")])
    box = str(tmp_path)
    container = Container(
        container_id="c1",
        framework_id="f",
        executor_id="e",
        resources=Resources(cpus=1),
        sandbox=box,
        launch=ContainerLaunch(argv=["true"], env={}, cwd=box),
    )

    async def main():
        with capture_logs() as logs:
            first = await containerizer.usage(container)
            second = await containerizer.usage(container)
        return first, second, logs

    first, second, logs = run(main())
    assert first == second == {**FINITE, "mem_bytes": 4096.0}
    warned = [(e["isolator"], e["key"]) for e in logs if e["log_level"] == "warning"]
    assert sorted(warned) == sorted(
        ("isolator/test/non-finite", key)
        for key in ("mem_bytes", "net_limit_mbps", "net_floor_mbps", "per_cpu", "pressure")
    )  # once each, not once per report
    assert containerizer.guard.counts() == {}  # not a failed call: the rest of it is kept


class _StatisticsMaster(ScriptedMaster):
    def container_statistics(self, conn, agent_id, statistics_json):
        self._record(conn, "container_statistics", agent_id, statistics_json)


def test_the_agent_reports_its_containers_in_strict_json(tmp_path):
    async def main():
        master = await _StatisticsMaster().start()
        plugins = load_plugins(entry_points=False, extra=(_Plugin(),))
        config = agent_config(
            tmp_path, master.address, isolation=["posix", "test/non-finite"], statistics_interval=0.05
        )
        async with running_agent(config, plugins) as agent:
            master.agent.run_task(FRAMEWORK, command_task("slow", "sleep 30"))
            await master.wait_state("slow", "TASK_RUNNING")
            reports = await wait_until(
                lambda: master.called("container_statistics"), what="a statistics report"
            )
            asked = json.dumps(await statistics.collect(agent), allow_nan=False)  # mezzo state --agent
            master.agent.kill_task(FRAMEWORK.framework_id, "slow")
            await master.wait_final("slow")
        await master.close()
        return reports[0], asked

    (agent_id, text), asked = run(main())
    ((container,),) = [_strict(text)]
    assert agent_id == "agent-1" and container["tasks"] == ["slow"]
    measured = dict(container["statistics"])
    assert isinstance(measured.pop("timestamp"), float)
    assert measured == FINITE
    assert [c["statistics"]["cpu_seconds"] for c in _strict(asked)] == [1.5]
