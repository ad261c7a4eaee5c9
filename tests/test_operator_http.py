"""The operator's HTTP calls (drain, reactivate, kill) and the documents that explain a
cluster (``/overview``, ``/offers``, ``/slaves`` paged, ``/tasks?state=``, each framework
with ``why_pending``): real masters and agents on loopback, real HTTP clients."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from typing import Any

import mezzo
from mezzo import CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo
from mezzo.acls import single_tenant
from mezzo.rpc.tls import client_tls
from mezzo.testing import LocalProcessCluster, wait_for

from .conftest import Recorder

FAST = {"allocation_interval": 0.01}


def request(
    cluster: LocalProcessCluster,
    method: str,
    path: str,
    form: str | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, Any]:
    """One request to the master; (status, the JSON body)."""
    host, port = cluster.master.rsplit(":", 1)
    if context is None:
        conn: http.client.HTTPConnection = http.client.HTTPConnection(host, int(port), timeout=10)
    else:
        conn = http.client.HTTPSConnection(host, int(port), timeout=10, context=context)
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {}
    try:
        conn.request(method, path, body=form, headers=headers)
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read() or b"null")
    finally:
        conn.close()


def get(cluster: LocalProcessCluster, path: str, context: ssl.SSLContext | None = None) -> Any:
    status, body = request(cluster, "GET", path, context=context)
    assert status == 200, (path, status, body)
    return body


def post(
    cluster: LocalProcessCluster, path: str, form: str, context: ssl.SSLContext | None = None
) -> tuple[int, Any]:
    return request(cluster, "POST", path, form, context)


def master_log(cluster: LocalProcessCluster) -> str:
    return (cluster.dir / "master.log").read_text(errors="replace")


def context_for(cluster: LocalProcessCluster, principal: str) -> ssl.SSLContext:
    return client_tls(cluster.client_tls(principal)).context


def command_task(offer: Any, task_id: str, command: str, cpus: float = 1) -> TaskInfo:
    return TaskInfo(
        task_id=task_id,
        agent_id=offer.agent_id,
        resources=Resources(cpus=cpus, mem=32),
        command=CommandInfo(value=command),
    )


class OneSleeperThenHold:
    """``on_offers``: launch one ``sleep 60`` on the first offer, then hold every other
    offer (neither use nor decline it)."""

    def __init__(self, task_id: str = "sleeper") -> None:
        self.task_id = task_id
        self.launched_on: str | None = None
        self.launch_offer: str | None = None
        self.lock = threading.Lock()

    def __call__(self, driver: mezzo.SchedulerDriver, offers: list) -> None:
        with self.lock:
            for offer in offers:
                if self.launched_on is None:
                    self.launched_on, self.launch_offer = offer.agent_id, offer.offer_id
                    driver.launch_tasks(
                        offer.offer_id,
                        [command_task(offer, self.task_id, "sleep 60")],
                        Filters(refuse_seconds=0),
                    )


def start(sched: Recorder, name: str, cluster: LocalProcessCluster, **kwargs: Any) -> mezzo.SchedulerDriver:
    tls = kwargs.pop("tls", None)
    driver = mezzo.SchedulerDriver(sched, FrameworkInfo(name=name, **kwargs), cluster.master, tls=tls)
    driver.start()
    wait_for(lambda: driver.framework_id, 20, f"{name} to register")
    return driver


def offers_of(sched: Recorder, agent_id: str) -> list[str]:
    with sched.lock:
        return [o.offer_id for _, o in sched.offers if o.agent_id == agent_id]


def rescinded(sched: Recorder) -> set[str]:
    with sched.lock:
        return {offer_id for _, offer_id in sched.rescinded}


def slave(cluster: LocalProcessCluster, agent_id: str, context: ssl.SSLContext | None = None) -> dict:
    (found,) = get(cluster, f"/master/slaves?slave_id={agent_id}", context)["slaves"]
    return found


def allocation_runs(cluster: LocalProcessCluster) -> float:
    return get(cluster, "/metrics/snapshot")["allocator/mesos/allocation_runs"]


def reasons_of(framework: dict) -> dict[str, dict]:
    return {r["reason"]: r for r in framework["why_pending"]}


# -- drain and reactivate ------------------------------------------------------------------


def test_drain_rescinds_offers_kills_after_the_grace_and_reactivate_offers_again(mezzo_cluster) -> None:
    cluster = mezzo_cluster(agents=1, master=FAST)
    plan = OneSleeperThenHold()
    sched = Recorder(plan)
    driver = start(sched, "drained", cluster)
    try:
        wait_for(lambda: "TASK_RUNNING" in sched.states_of("sleeper"), 30, "the sleeper to run")
        agent_id = plan.launched_on
        assert agent_id is not None
        # The rest of the agent is offered again and held.
        held = wait_for(
            lambda: [o for o in offers_of(sched, agent_id) if o != plan.launch_offer], 10, "an offer to hold"
        )
        assert get(cluster, "/offers")["total"] == 1

        # Wrong calls first: nothing drains.
        status, body = post(cluster, "/master/drain", "agentId=no-such-agent&gracePeriod=1")
        assert status == 404 and "'no-such-agent'" in body["error"], body
        status, body = post(cluster, "/master/drain", "gracePeriod=1")
        assert status == 400 and "'agentId'" in body["error"], body
        for grace in ("abc", "-1", "nan", "1e9"):
            status, body = post(cluster, "/drain", f"agentId={agent_id}&gracePeriod={grace}")
            assert status == 400 and "'gracePeriod'" in body["error"], (grace, body)
        status, body = post(cluster, "/master/reactivate", "agentId=no-such-agent")
        assert status == 404 and "'no-such-agent'" in body["error"], body
        status, body = post(cluster, "/master/reactivate", "")
        assert status == 400 and "'agentId'" in body["error"], body
        assert slave(cluster, agent_id)["draining"] is False

        status, body = post(cluster, "/master/drain", f"agentId={agent_id}&gracePeriod=1")
        assert (
            status == 200 and body["outcome"] == "DRAINING" and "1 offer(s) rescinded" in body["message"]
        ), body
        drained_at = time.monotonic()
        shown = slave(cluster, agent_id)
        assert shown["draining"] is True and shown["deactivated"] is True
        assert shown["drain_info"]["state"] == "DRAINING"
        assert shown["drain_info"]["config"] == {"max_grace_period": {"nanoseconds": 1_000_000_000}}
        overview = get(cluster, "/master/overview")
        assert overview["agents"] == {"active": 0, "inactive": 0, "draining": 1}
        wait_for(lambda: set(held) <= rescinded(sched), 10, "the held offer rescinded")
        assert get(cluster, "/offers") == {"offers": [], "total": 0}
        offered = len(offers_of(sched, agent_id))

        # After the grace, the sleeper is killed for the drain.
        final = wait_for(lambda: sched.final("sleeper"), 20, "the sleeper to end")
        assert mezzo.state_name(final.state) == "TASK_KILLED" and final.reason == "agent_drained", final
        assert time.monotonic() - drained_at >= 0.9
        wait_for(
            lambda: slave(cluster, agent_id)["drain_info"]["state"] == "DRAINED",
            10,
            "the agent to be DRAINED",
        )
        (task,) = get(cluster, "/tasks?state=TASK_KILLED")["tasks"]
        assert task["id"] == "sleeper" and task["reason"] == "agent_drained"
        # Its whole agent free, and still no offer of it, even after a cycle the
        # framework asked for (a revive) once the task's resources came back.
        wait_for(lambda: slave(cluster, agent_id)["used_resources"].get("cpus", 0) == 0, 10, "the cpus freed")
        runs = allocation_runs(cluster)
        driver.set_needs_offers(True)
        wait_for(lambda: allocation_runs(cluster) > runs, 10, "a cycle after the revive")
        assert get(cluster, "/offers")["total"] == 0
        assert len(offers_of(sched, agent_id)) == offered
        why = reasons_of(get(cluster, "/frameworks")["frameworks"][0])
        assert "1 agent(s) draining" in why["no_free_resources"]["message"], why

        status, body = post(cluster, "/master/reactivate", f"agentId={agent_id}")
        assert status == 200 and body["outcome"] == "reactivated", body
        wait_for(lambda: len(offers_of(sched, agent_id)) > offered, 10, "an offer of the reactivated agent")
        shown = slave(cluster, agent_id)
        assert shown["draining"] is False and shown["deactivated"] is False and "drain_info" not in shown
        assert get(cluster, "/overview")["agents"]["draining"] == 0
    finally:
        driver.stop()


# -- kill ------------------------------------------------------------------------------------


def test_kill_over_http_ends_the_task_killed_by_operator(mezzo_cluster) -> None:
    cluster = mezzo_cluster(agents=1, master=FAST)
    plan = OneSleeperThenHold()
    sched = Recorder(plan)
    driver = start(sched, "killed", cluster)
    try:
        wait_for(lambda: "TASK_RUNNING" in sched.states_of("sleeper"), 30, "the sleeper to run")
        fid = driver.framework_id
        status, body = post(cluster, "/master/kill", f"frameworkId={fid}&taskId=no-such-task")
        assert status == 404 and "'no-such-task'" in body["error"], body
        status, body = post(cluster, "/master/kill", "frameworkId=no-such-framework&taskId=sleeper")
        assert status == 404 and "'no-such-framework'" in body["error"], body
        status, body = post(cluster, "/kill", f"frameworkId={fid}")
        assert status == 400 and "'taskId'" in body["error"], body
        status, body = post(cluster, "/kill", "taskId=sleeper")
        assert status == 400 and "'frameworkId'" in body["error"], body
        for path in ("/master/kill", "/drain", "/reactivate"):
            assert request(cluster, "GET", path)[0] == 405
        assert sched.final("sleeper") is None

        status, body = post(cluster, "/master/kill", f"frameworkId={fid}&taskId=sleeper")
        assert status == 200 and body["outcome"] == "killing", body
        final = wait_for(lambda: sched.final("sleeper"), 20, "the sleeper to end")
        assert mezzo.state_name(final.state) == "TASK_KILLED" and final.reason == "killed_by_operator", final
        # Once ended, it is unknown to a kill.
        wait_for(lambda: get(cluster, "/tasks?state=TASK_RUNNING")["total"] == 0, 10, "the task ended")
        status, body = post(cluster, "/kill", f"frameworkId={fid}&taskId=sleeper")
        assert status == 404, body
    finally:
        driver.stop()


def test_over_tls_only_operators_may_kill_drain_and_reactivate(mezzo_cluster) -> None:
    acls = single_tenant(agents=["agent"], operators=["operator"], frameworks=["web"])
    cluster = mezzo_cluster(agents=1, tls=True, master={**FAST, "acls": acls})
    plan = OneSleeperThenHold()
    sched = Recorder(plan)
    driver = start(sched, "web-app", cluster, tls=cluster.client_tls("web"))
    web, operator = context_for(cluster, "web"), context_for(cluster, "operator")
    try:
        wait_for(lambda: "TASK_RUNNING" in sched.states_of("sleeper"), 30, "the sleeper to run")
        fid, agent_id = driver.framework_id, plan.launched_on
        assert agent_id is not None

        status, body = post(cluster, "/master/kill", f"frameworkId={fid}&taskId=sleeper", web)
        assert status == 403 and "master.acls.kill_tasks" in body["error"], body
        assert "principal web" in body["error"]
        status, body = post(cluster, "/master/drain", f"agentId={agent_id}&gracePeriod=0", web)
        assert status == 403 and "master.acls.drain_agents" in body["error"], body
        status, body = post(cluster, "/master/reactivate", f"agentId={agent_id}", web)
        assert status == 403 and "master.acls.drain_agents" in body["error"], body
        # A refusal says nothing of whether the object exists.
        status, body = post(cluster, "/master/drain", "agentId=no-such-agent", web)
        assert status == 403, body
        assert slave(cluster, agent_id, operator)["draining"] is False
        assert sched.final("sleeper") is None
        # Each refusal is written to the audit log.
        wait_for(
            lambda: all(
                f"action={a}" in master_log(cluster) for a in ("kill_task", "drain_agent", "reactivate_agent")
            ),
            10,
            "the refusals audited",
        )

        status, body = post(cluster, "/master/drain", f"agentId={agent_id}&gracePeriod=600", operator)
        assert status == 200 and body["outcome"] == "DRAINING", body
        assert slave(cluster, agent_id, operator)["drain_info"]["by"] == "operator"
        status, body = post(cluster, "/master/reactivate", f"agentId={agent_id}", operator)
        assert status == 200, body
        status, body = post(cluster, "/master/kill", f"frameworkId={fid}&taskId=sleeper", operator)
        assert status == 200, body
        final = wait_for(lambda: sched.final("sleeper"), 20, "the sleeper to end")
        assert mezzo.state_name(final.state) == "TASK_KILLED" and final.reason == "killed_by_operator", final
        assert "operator" in final.message
    finally:
        driver.stop()


# -- why pending -----------------------------------------------------------------------------


def test_why_pending_names_refusals_suppression_disconnection_and_held_offers(mezzo_cluster) -> None:
    cluster = mezzo_cluster(agents=1, master=FAST)
    agent_id = cluster.state()["agents"][0]["id"]
    drivers: list[mezzo.SchedulerDriver] = []

    def why(fid: str, document: str = "/frameworks") -> dict[str, dict]:
        (framework,) = [f for f in get(cluster, document)["frameworks"] if f["id"] == fid]
        return reasons_of(framework)

    try:
        # 1. A framework that declines the agent for a minute.
        refuser = Recorder(
            lambda d, offers: [d.decline_offer(o.offer_id, Filters(refuse_seconds=60)) for o in offers]
        )
        drivers.append(start(refuser, "refuser", cluster))
        refuser_id = drivers[-1].framework_id
        wait_for(lambda: "refuse_filters" in why(refuser_id), 10, "the refusal")
        refused = why(refuser_id)["refuse_filters"]
        assert refused["agents_refused"] == 1, refused
        ((listed_id, left),) = [(a["slave_id"], a["seconds_left"]) for a in refused["agents"]]
        assert listed_id == agent_id and 0 < left <= 60, refused

        # 2. A framework that holds what it is offered (the agent, refused by the other).
        holder = Recorder(lambda d, offers: None)
        drivers.append(start(holder, "holder", cluster))
        holder_id = drivers[-1].framework_id
        wait_for(lambda: "offers_held" in why(holder_id), 10, "the holder's offer")
        assert why(holder_id)["offers_held"]["offers"] == 1

        # 3. A suppressed framework.
        quiet = Recorder()
        drivers.append(start(quiet, "quiet", cluster))
        quiet_id = drivers[-1].framework_id
        drivers[-1].set_needs_offers(False)
        wait_for(lambda: "suppressed" in why(quiet_id), 10, "the suppression")

        # 4. A framework whose scheduler left, to fail over within 300 s.
        gone = Recorder()
        gone_driver = start(gone, "gone", cluster, failover_timeout=300)
        gone_id = gone_driver.framework_id
        gone_driver.stop(failover=True)
        wait_for(lambda: "disconnected" in why(gone_id), 10, "the disconnection")
        left = why(gone_id)["disconnected"]["failover_seconds_left"]
        assert 280 < left <= 300, left

        frameworks = {f["id"]: f for f in get(cluster, "/frameworks")["frameworks"]}
        assert (
            frameworks[gone_id]["connected"] is False
            and frameworks[gone_id]["failover_deadline"] > time.time()
        )
        assert frameworks[holder_id]["failover_deadline"] is None
        assert frameworks[refuser_id]["agents_refused"] == 1
        assert all("guarantee" in f for f in frameworks.values())

        # The same reasons on the front page, and the held offer in /offers.
        overview = get(cluster, "/overview")
        by_id = {f["id"]: reasons_of(f) for f in overview["frameworks"]}
        assert "refuse_filters" in by_id[refuser_id] and "offers_held" in by_id[holder_id]
        assert "suppressed" in by_id[quiet_id] and "disconnected" in by_id[gone_id]
        assert overview["offers"] == 1
        offers = get(cluster, "/master/offers")
        (offer,) = offers["offers"]
        assert offers["total"] == 1 and offer["framework_id"] == holder_id and offer["slave_id"] == agent_id
        assert offer["resources"]["cpus"] == 4.0
    finally:
        for d in drivers:
            d.stop()


# -- the documents ---------------------------------------------------------------------------


def test_overview_offers_slaves_and_tasks_documents(mezzo_cluster) -> None:
    cluster = mezzo_cluster(agents=2, master=FAST)
    launched: list[str] = []

    def launch_three_then_hold(driver: mezzo.SchedulerDriver, offers: list) -> None:
        for offer in offers:
            if not launched:
                launched.append(offer.agent_id)
                tasks = [
                    command_task(offer, "ok", "true", cpus=0.5),
                    command_task(offer, "bad", "exit 3", cpus=0.5),
                    command_task(offer, "sleeper", "sleep 60", cpus=0.5),
                ]
                driver.launch_tasks(offer.offer_id, tasks, Filters(refuse_seconds=0))

    sched = Recorder(launch_three_then_hold)
    driver = start(sched, "documented", cluster, user="nobody")
    try:
        fid = driver.framework_id
        wait_for(lambda: sched.final("ok") and sched.final("bad"), 30, "ok and bad to end")
        wait_for(lambda: "TASK_RUNNING" in sched.states_of("sleeper"), 30, "the sleeper to run")
        assert mezzo.state_name(sched.final("bad").state) == "TASK_FAILED"
        # All that is free is offered and held: the rest of each agent, and what the
        # ended tasks gave back (an offer of its own, or two).
        wait_for(
            lambda: sum(o["resources"].get("cpus", 0) for o in get(cluster, "/offers")["offers"]) == 7.5,
            10,
            "every free cpu offered and held",
        )
        agents = get(cluster, "/slaves")
        assert agents["total"] == 2 and len(agents["slaves"]) == 2
        hostnames = {a["id"]: a["hostname"] for a in agents["slaves"]}

        overview = get(cluster, "/master/overview")
        assert overview["agents"] == {"active": 2, "inactive": 0, "draining": 0}
        assert overview["resources"]["total"]["cpus"] == 8.0
        assert overview["resources"]["used"]["cpus"] == 0.5
        assert overview["resources"]["offered"]["cpus"] == 7.5
        tasks = overview["tasks"]
        assert (tasks["TASK_RUNNING"], tasks["TASK_FINISHED"], tasks["TASK_FAILED"]) == (1, 1, 1), tasks
        assert tasks["TASK_KILLED"] == 0
        offers = get(cluster, "/offers")
        assert 3 <= offers["total"] == len(offers["offers"]) == overview["offers"] <= 4, offers
        assert overview["completed_frameworks"] == 0
        assert overview["master"]["pid"] == f"master@{cluster.master}"
        (framework,) = overview["frameworks"]
        assert framework["id"] == fid and framework["TASK_FAILED"] == 1 and "tasks" not in framework
        assert reasons_of(framework)["offers_held"]["offers"] == offers["total"]

        assert {o["slave_id"] for o in offers["offers"]} == set(hostnames)
        assert all(o["framework_id"] == fid for o in offers["offers"])
        page = get(cluster, "/offers?limit=1&offset=1")
        assert page["offers"] == offers["offers"][1:2] and page["total"] == offers["total"]

        first = get(cluster, "/slaves?limit=1&offset=0")
        second = get(cluster, "/master/slaves?limit=1&offset=1")
        assert first["total"] == second["total"] == 2
        assert len(first["slaves"]) == len(second["slaves"]) == 1
        assert first["slaves"][0]["id"] != second["slaves"][0]["id"]
        assert get(cluster, "/slaves?offset=2") == {"slaves": [], "recovered_slaves": [], "total": 2}
        status, body = request(cluster, "GET", "/slaves?limit=-1")
        assert status == 400 and "'limit'" in body["error"], body

        finished = get(cluster, "/tasks?state=TASK_FINISHED")
        assert [t["id"] for t in finished["tasks"]] == ["ok"] and finished["total"] == 1
        assert finished["tasks"][0]["exit_code"] == 0
        (bad,) = get(cluster, f"/master/tasks?state=TASK_FAILED&framework_id={fid}")["tasks"]
        assert bad["id"] == "bad" and bad["exit_code"] == 3, bad
        (running,) = get(cluster, "/tasks?state=TASK_RUNNING")["tasks"]
        assert running["id"] == "sleeper" and running["exit_code"] is None
        assert get(cluster, "/tasks")["total"] == 3
        assert get(cluster, "/tasks?state=TASK_KILLED") == {"tasks": [], "total": 0}
        for t in (bad, running):
            assert t["hostname"] == hostnames[launched[0]]
            # Command tasks run under an executor named after the task.
            assert t["sandbox"] == f"/frameworks/{fid}/executors/{t['id']}/runs/latest"
            # ...and the agent made it there (its work dir is named after its hostname here).
            runs = cluster.dir / t["hostname"] / t["sandbox"].removeprefix("/").removesuffix("/latest")
            assert [p for p in runs.iterdir() if p.is_dir()], runs
        status, body = request(cluster, "GET", "/tasks?state=BOGUS")
        assert status == 400 and "'state'" in body["error"], body
        status, body = request(cluster, "GET", "/tasks?state=task_running")
        assert status == 400 and "'state'" in body["error"], body
    finally:
        driver.stop()
