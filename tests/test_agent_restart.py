"""An agent process that is SIGKILLed and restarted takes its tasks back (agent checkpointing).

The tasks keep running while the agent is down (each leads its own session); the
restarted agent re-registers under the same id, adopts the tasks still running,
reports the one that ended meanwhile with its real exit status, and every task
reaches exactly one terminal state as its scheduler sees it.
"""

from __future__ import annotations

import signal
import socket
import time

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo
from mezzo.testing import free_port

from .conftest import Recorder, wait_for

TASKS = ("a", "b", "c", "doomed", "early")


def _launch_all(tmp_path, launched: list):
    def on_offers(driver, offers):
        for o in offers:
            if launched:
                driver.decline_offer(o.offer_id, Filters(refuse_seconds=0.2))
                continue
            launched.append(o.agent_id)
            tasks = []
            for tid in TASKS:
                go = tmp_path / ("go-early" if tid == "early" else "go")
                end = "exit 7" if tid == "early" else "echo finished"
                tasks.append(TaskInfo(
                    task_id=tid, agent_id=o.agent_id, resources=Resources(cpus=0.5, mem=64),
                    command=CommandInfo(value=f"echo $$ >> {tmp_path}/{tid}.pids; "
                                              f"while [ ! -e {go} ]; do sleep 0.05; done; {end}")))
            driver.launch_tasks(o.offer_id, tasks, Filters(refuse_seconds=0))

    return on_offers


def _run_all(cluster, drivers, tmp_path, name: str):
    """Register a framework that launches :data:`TASKS` on the one agent; once each runs
    (and wrote its pid): the recorder, the driver, the agent id and each task's pid file text."""
    launched: list = []
    rec = Recorder(_launch_all(tmp_path, launched))
    driver = drivers(rec, name, cluster.master)
    wait_for(lambda: all("TASK_RUNNING" in rec.states_of(t) for t in TASKS)
             and all((tmp_path / f"{t}.pids").exists() for t in TASKS), 20, "every task to run")
    (agent_id,) = launched
    return rec, driver, agent_id, {t: (tmp_path / f"{t}.pids").read_text() for t in TASKS}


def test_sigkilled_agent_restarts_with_its_tasks(make_cluster, drivers, tmp_path):
    cluster = make_cluster(1, master={"allocation_interval": 0.01}, agent={"reconnect_interval": 0.1},
                           agent_resources="cpus:4;mem:1024")
    rec, driver, agent_id, pids = _run_all(cluster, drivers, tmp_path, "restart")
    work = cluster.dir / "agent-1"

    cluster.kill("agent-1", signal.SIGKILL)
    wait_for(lambda: not cluster.state()["agents"][0]["connected"], 10, "the master to see the agent go")
    (tmp_path / "go-early").touch()
    wait_for(lambda: list(work.glob("frameworks/*/executors/early/runs/*.mezzo-exit")), 10,
             "the early task to end while the agent is down")
    assert rec.final("early") is None  # nobody could report it yet

    cluster.start_agent(1)
    state = cluster.wait_for_agents(1)
    (agent,) = state["agents"]
    assert agent["id"] == agent_id and agent["hostname"] == "agent-1"
    early = wait_for(lambda: rec.final("early"), 15, "the early task's end")
    assert mezzo.state_name(early.state) == "TASK_FAILED" and early.exit_code == 7, early

    # The restarted agent still controls the adopted tasks: one is killed, the rest finish.
    driver.kill_task("doomed")
    wait_for(lambda: rec.final("doomed"), 15, "the kill")
    (tmp_path / "go").touch()
    wait_for(lambda: all(rec.final(t) for t in TASKS), 15, "every task to end")

    expected = {"a": "TASK_FINISHED", "b": "TASK_FINISHED", "c": "TASK_FINISHED",
                "doomed": "TASK_KILLED", "early": "TASK_FAILED"}
    wait_for(lambda: cluster.state()["tasks"] == [], 10, "the master to release every task")
    state = cluster.state()
    for tid, final in expected.items():
        terminal = [s for s in rec.states_of(tid) if mezzo.is_terminal(getattr(mezzo.TaskState, s))]
        assert terminal == [final], (tid, rec.states_of(tid))
        # Written once: the process was adopted, never started again.
        assert (tmp_path / f"{tid}.pids").read_text() == pids[tid], tid
    (agent,) = state["agents"]
    assert agent["id"] == agent_id and agent["connected"] and agent["tasks"] == 0
    (framework,) = state["frameworks"]
    assert framework["tasks"] == 0 and not framework["used"].get("cpus")
    assert agent["free"].get("cpus", 0) + sum(o["resources"].get("cpus", 0) for o in state["offers"]) == 4.0
    log = (cluster.dir / "agent-1.log").read_text()
    assert "recovered from the checkpoint" in log and "command task adopted after the agent restarted" in log


def test_agent_back_too_late_has_what_it_recovered_killed(make_cluster, drivers, tmp_path):
    # Past agent_reregister_timeout the agent is declared lost (unreachable): back later,
    # under its id, the tasks its framework was told are lost are killed, unreported.
    cluster = make_cluster(1, master={"allocation_interval": 0.01, "agent_reregister_timeout": 1.0},
                           agent={"reconnect_interval": 0.1}, agent_resources="cpus:4;mem:1024")
    rec, _driver, agent_id, pid_files = _run_all(cluster, drivers, tmp_path, "too-late")
    pids = [int(text) for text in pid_files.values()]

    cluster.kill("agent-1", signal.SIGKILL)
    # The master gives up on the agent: its tasks are reported lost.
    wait_for(lambda: all(rec.final(t) for t in TASKS), 15, "the tasks to be reported lost")
    assert {mezzo.state_name(rec.final(t).state) for t in TASKS} == {"TASK_LOST"}
    (tmp_path / "go-early").touch()  # "early" ends meanwhile: nobody may report that now

    cluster.start_agent(1)
    state = wait_for(lambda: (s := cluster.state()) and s["agents"] and s["agents"][0]["connected"] and s,
                     20, "the agent to come back")
    assert state["agents"][0]["id"] == agent_id and state["agents"][0]["tasks"] == 0
    wait_for(lambda: not any(_alive(p) for p in pids), 15, "the recovered tasks to be killed")
    time.sleep(0.5)  # anything the old tasks could still report would be here by now
    for tid in TASKS:
        terminal = [s for s in rec.states_of(tid) if mezzo.is_terminal(getattr(mezzo.TaskState, s))]
        assert terminal == ["TASK_LOST"], (tid, rec.states_of(tid))
    assert cluster.state()["tasks"] == []
    log = (cluster.dir / "agent-1.log").read_text()
    assert "recovered from the checkpoint" in log
    assert "killing a task reported lost, on an agent that came back" in (cluster.dir / "master.log").read_text()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_agent_stopped_for_an_upgrade_leaves_its_tasks_to_the_next(make_cluster, drivers, tmp_path):
    # keep_tasks_on_stop: SIGTERM (systemctl stop) ends the agent but not its tasks;
    # the agent started next on the same work dir takes them back, nothing reported lost.
    cluster = make_cluster(1, master={"allocation_interval": 0.01},
                           agent={"reconnect_interval": 0.1, "keep_tasks_on_stop": True},
                           agent_resources="cpus:4;mem:1024")
    rec, _driver, agent_id, pids = _run_all(cluster, drivers, tmp_path, "upgrade")

    cluster.kill("agent-1", signal.SIGTERM)  # waits for the process to exit
    assert all(_alive(int(p)) for p in pids.values()), "a task died with the agent"
    log = (cluster.dir / "agent-1.log").read_text()
    assert "leaving tasks running for the next agent on this work dir" in log
    assert (cluster.dir / "agent-1" / "meta" / "journal").exists(), "the journal went with the agent"
    (tmp_path / "go-early").touch()  # one ends while no agent runs

    cluster.start_agent(1)
    (agent,) = cluster.wait_for_agents(1)["agents"]
    assert agent["id"] == agent_id
    early = wait_for(lambda: rec.final("early"), 15, "the early task's end")
    assert mezzo.state_name(early.state) == "TASK_FAILED" and early.exit_code == 7, early
    (tmp_path / "go").touch()
    wait_for(lambda: all(rec.final(t) for t in TASKS), 15, "every task to end")
    for tid in TASKS:
        terminal = [s for s in rec.states_of(tid) if mezzo.is_terminal(getattr(mezzo.TaskState, s))]
        assert terminal == ["TASK_FAILED" if tid == "early" else "TASK_FINISHED"], (tid, rec.states_of(tid))
        assert (tmp_path / f"{tid}.pids").read_text() == pids[tid], tid  # adopted, not started again
    wait_for(lambda: cluster.state()["tasks"] == [], 10, "the master to release every task")


def test_an_agent_that_fails_to_start_leaves_what_it_recovered_running(make_cluster, drivers, tmp_path):
    # A restart that takes its tasks back from the journal and then cannot bind its port
    # exits (one line, status 2) as a crashed agent would: the tasks run on for the next.
    port = free_port()
    cluster = make_cluster(1, master={"allocation_interval": 0.01},
                           agent={"reconnect_interval": 0.1, "listen": f"127.0.0.1:{port}"},
                           agent_resources="cpus:4;mem:1024")
    rec, _driver, _agent_id, pids = _run_all(cluster, drivers, tmp_path, "failed-start")
    cluster.kill("agent-1", signal.SIGKILL)
    with socket.create_server(("127.0.0.1", port)):  # someone else has the port now
        cluster.start_agent(1)
        assert cluster.procs["agent-1"].wait(30) == 2
    log = (cluster.dir / "agent-1.log").read_text()
    assert "recovered from the checkpoint" in log and "address is in use" in log
    assert all(_alive(int(p)) for p in pids.values()), "the failed start killed what it recovered"

    cluster.start_agent(1)
    cluster.wait_for_agents(1)
    (tmp_path / "go").touch()
    (tmp_path / "go-early").touch()
    wait_for(lambda: all(rec.final(t) for t in TASKS), 15, "every task to end")
    assert {t: mezzo.state_name(rec.final(t).state) for t in TASKS} == {
        "a": "TASK_FINISHED", "b": "TASK_FINISHED", "c": "TASK_FINISHED",
        "doomed": "TASK_FINISHED", "early": "TASK_FAILED"}
    assert {t: (tmp_path / f"{t}.pids").read_text() for t in TASKS} == pids  # adopted, not run again
