"""Every action authorized: the master's ``[master.acls]`` against real peers (issue 15).

Real clusters (master and agent subprocesses), frameworks as real scheduler drivers or
raw Thrift clients (:class:`mezzo.testing.RawPeer`) holding certificates of the
cluster's CA for principals of the test's choosing. Each refusal is checked three
ways: the peer gets an error naming the ACL, the master writes an audit line
(``component=audit``, ``refused``), and the allowed counterpart goes through, so each
test fails when the ACLs refuse too little or too much.

One TLS cluster, shared by the module's tests (each stops the frameworks it starts),
runs with :data:`ACLS`; a cluster with no rules at all and a plaintext one have a
test each.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import mezzo
from mezzo import AgentInfo, CommandInfo, Filters, FrameworkInfo, Resources, TaskInfo
from mezzo.certs import tls_toml
from mezzo.services import AGENT, SCHEDULER
from mezzo.state_client import NotAllowed, fetch_metrics, fetch_state
from mezzo.testing import LocalProcessCluster, RawPeer, wait_for

from .conftest import Recorder

ACLS: dict[str, Any] = {
    "permissive": False,
    "register_agents": [{"principals": ["agent"]}],
    "register_frameworks": [
        {"principals": ["etl"], "roles": ["batch"]},
        {"principals": ["operator", "web"], "roles": "*"},
    ],
    "run_tasks": [
        {"principals": "*", "users": ["root"], "allow": False},
        {"principals": ["etl"], "users": ["etl"]},
        {"principals": ["operator", "web"], "users": "*"},
    ],
    "view_frameworks": [
        {"principals": ["operator"], "users": "*"},
        {"principals": ["etl"], "users": ["etl"]},
        {"principals": ["blind"], "users": "*", "allow": False},
    ],
    "view_cluster": [{"principals": ["operator"]}],
}
"""The shared cluster's table: ``etl`` registers in role ``batch``, runs tasks as
``etl`` and sees frameworks of user ``etl``; ``web`` and the operator register in any
role and run tasks as anyone but root; only the operator sees the cluster; ``blind``
is denied every framework; nobody but ``agent`` registers agents."""

SMALL = Resources(cpus=0.1, mem=16)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessCluster]:
    with LocalProcessCluster(
        1,
        directory=str(tmp_path_factory.mktemp("acls")),
        tls=True,
        master={"allocation_interval": 0.01, "acls": ACLS},
        # Tasks run as the agent's own user: the test's "etl" and "web" are no users of this host.
        agent={"switch_user": False},
        agent_resources="cpus:4;mem:1024",
    ) as started:
        yield started


def audit_lines(cluster: LocalProcessCluster, *words: str) -> list[str]:
    """The master's audit lines (refusals) holding every one of ``words``."""
    lines = (cluster.dir / "master.log").read_text(errors="replace").splitlines()
    return [
        line
        for line in lines
        if "component=audit" in line and "refused" in line and all(w in line for w in words)
    ]


def wait_audit(cluster: LocalProcessCluster, *words: str) -> list[str]:
    return wait_for(lambda: audit_lines(cluster, *words), 15, f"an audit line with {words}")


def launching(tasks: Callable[[str], list[TaskInfo]]) -> Callable[[Any, list], None]:
    """An ``on_offers``: launch ``tasks(agent_id)`` on the first offer, decline the rest."""
    launched: list[str] = []

    def on_offers(driver: mezzo.SchedulerDriver, offers: list) -> None:
        for offer in offers:
            if launched:
                driver.decline_offer(offer.offer_id, Filters(refuse_seconds=60))
                continue
            launched.append(offer.agent_id)
            driver.launch_tasks([offer.offer_id], tasks(offer.agent_id), Filters(refuse_seconds=0))

    return on_offers


def declining(driver: mezzo.SchedulerDriver, offers: list) -> None:
    for offer in offers:
        driver.decline_offer(offer.offer_id, Filters(refuse_seconds=60))


def task(task_id: str, agent_id: str, command: str = "true", user: str | None = None) -> TaskInfo:
    return TaskInfo(
        task_id=task_id, agent_id=agent_id, resources=SMALL, command=CommandInfo(value=command, user=user)
    )


@contextlib.contextmanager
def framework(
    cluster: LocalProcessCluster,
    principal: str | None,
    on_offers: Callable[[Any, list], None] | None = declining,
    **info: Any,
) -> Iterator[tuple[Recorder, mezzo.SchedulerDriver]]:
    """A scheduler driver of ``principal`` (None: plaintext), stopped on the way out."""
    rec = Recorder(on_offers)
    tls = cluster.client_tls(principal) if principal is not None else None
    info.setdefault("name", f"{principal}-fw")
    driver = mezzo.SchedulerDriver(rec, FrameworkInfo(**info), cluster.master, tls=tls)
    driver.start()
    try:
        yield rec, driver
    finally:
        driver.stop()
        driver.join()


def final(rec: Recorder, task_id: str) -> mezzo.TaskStatus:
    wait_for(lambda: rec.final(task_id) is not None, 30, f"a terminal status of {task_id}")
    status = rec.final(task_id)
    assert status is not None
    return status


# -- register_frameworks ---------------------------------------------------------------


def test_a_framework_registers_only_in_a_role_its_principal_may(cluster: LocalProcessCluster) -> None:
    with framework(cluster, "etl", role="prod", user="etl") as (refused_rec, _):
        wait_for(lambda: refused_rec.errors, 20, "the refusal")
        (message,) = refused_rec.errors
        assert "principal etl may not register frameworks in role 'prod'" in message
        assert "master.acls.register_frameworks" in message
        assert not refused_rec.registered_event.is_set()
    (line,) = wait_audit(cluster, "action=register_framework", "principal=etl", "role prod")
    assert "master.acls.register_frameworks" in line
    # A raw client gets the same error, and the framework is not in the state.
    peer = RawPeer(cluster.master, SCHEDULER, tls=cluster.client_tls("etl"), timeout=20)
    try:
        peer.send("register_framework", FrameworkInfo(name="raw", user="etl", role="ops"))
        with pytest.raises(RuntimeError, match=r"may not register frameworks in role 'ops' \(master\.acls\."):
            peer.expect("registered")
    finally:
        peer.close()
    wait_audit(cluster, "action=register_framework", "principal=etl", "role ops")
    assert not [f for f in cluster.state()["frameworks"] if f["name"] in ("etl-fw", "raw")]
    # The same principal in its role registers.
    with framework(cluster, "etl", role="batch", user="etl") as (rec, driver):
        assert rec.registered_event.wait(20), rec.errors
        assert rec.errors == []
        names = {f["id"]: f["name"] for f in cluster.state()["frameworks"]}
        assert names.get(driver.framework_id) == "etl-fw"


# -- run_tasks ---------------------------------------------------------------------------


def test_a_task_runs_only_as_a_user_its_principal_may(cluster: LocalProcessCluster) -> None:
    def tasks(agent_id: str) -> list[TaskInfo]:
        return [
            task("as-framework-user", agent_id),  # FrameworkInfo.user: etl
            task("as-web", agent_id, user="web"),  # CommandInfo.user
            task("as-root", agent_id, user="root"),
            task("also-allowed", agent_id, user="etl"),
        ]

    with framework(cluster, "etl", launching(tasks), role="batch", user="etl") as (rec, driver):
        assert mezzo.state_name(final(rec, "as-framework-user").state) == "TASK_FINISHED"
        assert mezzo.state_name(final(rec, "also-allowed").state) == "TASK_FINISHED"
        for tid, user in (("as-web", "web"), ("as-root", "root")):
            status = final(rec, tid)
            assert mezzo.state_name(status.state) == "TASK_ERROR", (tid, status.message)
            assert status.reason == "task_unauthorized"
            assert (
                status.message == f"principal etl may not run tasks as user {user!r} (master.acls.run_tasks)"
            )
        assert rec.states_of("as-web") == ["TASK_ERROR"]  # never staged on the agent
        fid = driver.framework_id
    for tid in ("as-web", "as-root"):
        (line,) = wait_audit(cluster, "action=run_tasks", "principal=etl", f"task {tid}")
    assert not audit_lines(cluster, "action=run_tasks", "task as-framework-user")
    state = cluster.state()
    ran = {t["id"] for t in state["completed_tasks"] if t["framework_id"] == fid}
    assert {"as-framework-user", "also-allowed"} <= ran and not ran & {"as-web", "as-root"}


def test_a_framework_user_its_principal_may_not_run_as_is_refused_unless_the_command_names_one(
    cluster: LocalProcessCluster,
) -> None:
    def tasks(agent_id: str) -> list[TaskInfo]:
        return [task("as-mallory", agent_id), task("as-etl", agent_id, user="etl")]

    # Registering is by role; what a task may run as is checked per task.
    with framework(cluster, "etl", launching(tasks), role="batch", user="mallory") as (rec, _):
        status = final(rec, "as-mallory")
        assert mezzo.state_name(status.state) == "TASK_ERROR" and status.reason == "task_unauthorized"
        assert "user 'mallory'" in status.message
        assert mezzo.state_name(final(rec, "as-etl").state) == "TASK_FINISHED"
    wait_audit(cluster, "action=run_tasks", "principal=etl", "task as-mallory")


def test_a_deny_rule_for_root_beats_a_later_allow_of_every_user(cluster: LocalProcessCluster) -> None:
    def tasks(agent_id: str) -> list[TaskInfo]:
        return [task("web-root", agent_id, user="root"), task("web-nobody", agent_id, user="nobody")]

    with framework(cluster, "web", launching(tasks), user="web") as (rec, _):
        status = final(rec, "web-root")
        assert mezzo.state_name(status.state) == "TASK_ERROR" and status.reason == "task_unauthorized"
        assert "principal web may not run tasks as user 'root'" in status.message
        assert mezzo.state_name(final(rec, "web-nobody").state) == "TASK_FINISHED"
    wait_audit(cluster, "action=run_tasks", "principal=web", "task web-root")


# -- register_agents -------------------------------------------------------------------


@pytest.mark.parametrize("call", ["register_agent", "reregister_agent"])
def test_a_principal_not_allowed_cannot_register_an_agent(cluster: LocalProcessCluster, call: str) -> None:
    before = cluster.state()["agents"]
    assert [a["hostname"] for a in before] == ["agent-1"]  # the real one, principal "agent"
    info = AgentInfo(hostname=f"evil-{call}", port=5051, resources=Resources(cpus=64, mem=65536))
    args: tuple[Any, ...] = (info,) if call == "register_agent" else (info, [], [], [])
    if call == "reregister_agent":
        info.agent_id = "made-up"
    attacker = RawPeer(cluster.master, AGENT, tls=cluster.client_tls("intruder"), timeout=20)
    try:
        attacker.send(call, *args)
        with pytest.raises(
            RuntimeError,
            match=rf"{call}: principal intruder may not register agents \(master\.acls\.register_agents\)",
        ):
            attacker.expect("registered" if call == "register_agent" else "reregistered")
    finally:
        attacker.close()
    (line,) = wait_audit(cluster, f"action={call}", "principal=intruder")
    assert "master.acls.register_agents" in line
    after = cluster.state()["agents"]
    assert [a["hostname"] for a in after] == ["agent-1"]
    assert fetch_metrics(cluster.master, timeout=10, tls=cluster.tls)["agents"] == 1


# -- view_frameworks and view_cluster ----------------------------------------------------


def test_a_viewer_sees_only_the_frameworks_of_its_users_and_the_operator_everything(
    cluster: LocalProcessCluster,
) -> None:
    def hold(agent_id: str) -> list[TaskInfo]:
        return [task("etl-long", agent_id, command="sleep 60")]

    with (
        framework(cluster, "etl", launching(hold), role="batch", user="etl") as (etl, etl_driver),
        framework(cluster, "web", user="web") as (web, web_driver),
    ):
        wait_for(lambda: "TASK_RUNNING" in etl.states_of("etl-long"), 30, "etl's task running")
        assert web.registered_event.wait(20), web.errors
        etl_id, web_id = etl_driver.framework_id, web_driver.framework_id

        seen = fetch_state(cluster.master, timeout=10, tls=cluster.client_tls("etl"))
        assert "master.acls" in seen["partial"]
        assert [f["id"] for f in seen["frameworks"]] == [etl_id]
        assert [(t["id"], t["framework_id"]) for t in seen["tasks"]] == [("etl-long", etl_id)]
        assert all(t["framework_id"] == etl_id for t in seen["completed_tasks"])
        assert all(o["framework_id"] == etl_id for o in seen["offers"])
        assert "agents" not in seen  # no view_cluster
        assert set(seen["master"]) == {"id", "address", "leading", "leader"}

        everything = fetch_state(cluster.master, timeout=10, tls=cluster.tls)
        assert "partial" not in everything
        assert {etl_id, web_id} <= {f["id"] for f in everything["frameworks"]}
        assert [a["hostname"] for a in everything["agents"]] == ["agent-1"]
        assert "etl-long" in {t["id"] for t in everything["tasks"]}
        assert "allocator" in everything["master"]
        assert fetch_metrics(cluster.master, timeout=10, tls=cluster.tls)["frameworks"] >= 2

        # etl may see frameworks but not the cluster: its metrics are refused.
        with pytest.raises(NotAllowed, match=r"request_metrics: principal etl may not view the cluster"):
            fetch_metrics(cluster.master, timeout=10, tls=cluster.client_tls("etl"))
    wait_audit(cluster, "action=request_metrics", "principal=etl", "master.acls.view_cluster")
    # Its view is rendered anew (one snapshot per distinct view): the framework is gone.
    etl_tls = cluster.client_tls("etl")
    wait_for(
        lambda: fetch_state(cluster.master, timeout=10, tls=etl_tls)["frameworks"] == [],
        20,
        "etl's framework gone from its view",
    )


def test_a_principal_without_view_rules_is_refused_the_state_and_the_metrics(
    cluster: LocalProcessCluster,
) -> None:
    web = cluster.client_tls("web")
    with pytest.raises(
        NotAllowed, match=r"request_state: principal web may not view the cluster \(master\.acls"
    ):
        fetch_state(cluster.master, timeout=10, tls=web)
    with pytest.raises(
        NotAllowed, match=r"request_metrics: principal web may not view the cluster \(master\.acls"
    ):
        fetch_metrics(cluster.master, timeout=10, tls=web)
    line = wait_audit(cluster, "action=request_state", "principal=web")[0]
    assert "master.acls.view_cluster, view_frameworks" in line
    wait_audit(cluster, "action=request_metrics", "principal=web")


def test_mezzo_state_refused_exits_non_zero_with_one_line(
    cluster: LocalProcessCluster, tmp_path: Path
) -> None:
    def mezzo_state(principal: str, *flags: str) -> subprocess.CompletedProcess:
        config = tmp_path / f"{principal}.toml"
        config.write_text(tls_toml(cluster.client_tls(principal)))
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "mezzo",
                "state",
                "--master",
                cluster.master,
                "--config",
                str(config),
                *flags,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    refused = mezzo_state("web")
    assert refused.returncode != 0 and refused.stdout == ""
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("mezzo state: request_state: principal web may not view the cluster")
    assert "master.acls" in line
    metrics = mezzo_state("etl", "--metrics")
    assert metrics.returncode != 0
    (line,) = metrics.stderr.strip().splitlines()
    assert "master.acls: view_cluster" in line
    allowed = mezzo_state("etl")
    assert allowed.returncode == 0, allowed.stderr
    assert '"partial"' in allowed.stdout


def test_a_viewer_denied_every_framework_and_not_the_cluster_is_refused(cluster: LocalProcessCluster) -> None:
    """``blind``'s only view rule denies every user, and it has no view_cluster: it may
    see none of the state, so (request_state's contract, and the commit's "Tool.error
    refuses a viewer who may see nothing") it must be answered error like a viewer
    without rules, not an empty "partial" state carrying the master's id and address."""
    with pytest.raises(NotAllowed, match="master.acls"):
        fetch_state(cluster.master, timeout=10, tls=cluster.client_tls("blind"))


# -- TLS and no rules at all -------------------------------------------------------------


def test_tls_without_any_rule_refuses_every_agent_framework_and_viewer(mezzo_cluster: Any) -> None:
    # The harness waits for the master's state as the operator: refused, like everyone.
    with pytest.raises(NotAllowed, match=r"principal operator may not view the cluster"):
        mezzo_cluster(agents=1, tls=True, master={"allocation_interval": 0.01, "acls": {}})
    (bare,) = mezzo_cluster.clusters
    log = (bare.dir / "master.log").read_text()
    assert "acls='deny all'" in log and "tls=True" in log
    assert "TLS is on and [master.acls] has no rules" in log
    bare.start_agent(1)
    wait_audit(bare, "action=register_agent", "principal=agent", "master.acls.register_agents")
    wait_for(
        lambda: "the master refused this agent" in (bare.dir / "agent-1.log").read_text(),
        20,
        "the agent to log its refusal",
    )
    with framework(bare, "operator") as (rec, _):
        wait_for(lambda: rec.errors, 20, "the framework's refusal")
        assert "principal operator may not register frameworks in role '*'" in rec.errors[0]
        assert not rec.registered_event.is_set()
    wait_audit(bare, "action=register_framework", "principal=operator")
    with pytest.raises(NotAllowed):
        fetch_metrics(bare.master, timeout=10, tls=bare.tls)


# -- without TLS -------------------------------------------------------------------------


def test_rules_for_anyone_apply_to_a_plaintext_cluster(mezzo_cluster: Any) -> None:
    plain = mezzo_cluster(
        agents=1,
        master={
            "allocation_interval": 0.01,
            "acls": {"run_tasks": [{"principals": "*", "users": ["root"], "allow": False}]},
        },
        agent={"switch_user": False},
        agent_resources="cpus:4;mem:1024",
    )

    def tasks(agent_id: str) -> list[TaskInfo]:
        return [task("plain-root", agent_id, user="root"), task("plain-nobody", agent_id)]

    # Everything else is allowed (no TLS: permissive): registering, viewing, metrics.
    with framework(plain, None, launching(tasks), user="nobody") as (rec, driver):
        status = final(rec, "plain-root")
        assert mezzo.state_name(status.state) == "TASK_ERROR" and status.reason == "task_unauthorized"
        assert "principal a caller without a certificate may not run tasks as user 'root'" in status.message
        assert mezzo.state_name(final(rec, "plain-nobody").state) == "TASK_FINISHED"
        state = fetch_state(plain.master, timeout=10)
        assert "partial" not in state and [f["id"] for f in state["frameworks"]] == [driver.framework_id]
        assert fetch_metrics(plain.master, timeout=10)["agents"] == 1
    wait_audit(plain, "action=run_tasks", "principal=None", "task plain-root")


def test_a_plaintext_master_denying_by_default_does_not_claim_tls_is_on(mezzo_cluster: Any) -> None:
    """``permissive = false`` and no rule on a master without TLS refuses everyone (no
    caller has a principal), and the master warns at start; the warning must not say
    that TLS is on when the same start line says ``tls=False``."""
    with pytest.raises(NotAllowed, match=r"a caller without a certificate may not view the cluster"):
        mezzo_cluster(agents=0, master={"acls": {"permissive": False}})
    (denying,) = mezzo_cluster.clusters
    log = (denying.dir / "master.log").read_text()
    assert "tls=False" in log and "acls='deny all'" in log
    assert "[master.acls] has no rules: every framework, agent and viewer will be refused" in log
    assert "TLS is on" not in log
