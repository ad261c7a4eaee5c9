"""ExecutorDriver against a scripted agent over real loopback sockets."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import mezzo
import pytest
from mezzo.driver import DriverError, DriverStatus
from mezzo.services import EXECUTOR
from scripted_peers import wait_count, wait_until


class Worker(mezzo.Executor):
    """Reports TASK_RUNNING for every launched task and records callbacks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, tuple]] = []

    def _note(self, name, *args):
        with self.lock:
            self.events.append((name, args))

    def of(self, name):
        with self.lock:
            return [args for n, args in self.events if n == name]

    def wait(self, name, count=1, timeout=5.0):
        return wait_count(lambda: self.of(name), count, timeout, name)

    def registered(self, driver, executor_info, framework_info, agent_info):
        self._note("registered", executor_info, framework_info, agent_info)

    def launch_task(self, driver, task):
        self._note("launch_task", task)
        driver.send_status_update(mezzo.TaskStatus(task_id=task.task_id, state=mezzo.TaskState.TASK_RUNNING))

    def kill_task(self, driver, task_id):
        self._note("kill_task", task_id)

    def framework_message(self, driver, data):
        self._note("framework_message", data)

    def shutdown(self, driver):
        self._note("shutdown")

    def error(self, driver, message):
        self._note("error", message)


@pytest.fixture
def environment(agent, monkeypatch, tmp_path):
    env = {
        "MEZZO_AGENT_ENDPOINT": agent.address,
        "MEZZO_FRAMEWORK_ID": "fw-1",
        "MEZZO_EXECUTOR_ID": "ex-1",
        "MEZZO_SANDBOX": str(tmp_path),
        "MEZZO_EXECUTOR_TOKEN": "tok-1",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def a_task(task_id="t1"):
    return mezzo.TaskInfo(
        task_id=task_id, agent_id="agent-1", resources=mezzo.Resources(cpus=1, mem=64), data=b"payload"
    )


def run_in_thread(driver):
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", driver.run()), daemon=True)
    thread.start()
    return thread, result


def test_missing_environment_is_a_clear_error(monkeypatch):
    for name in ("MEZZO_AGENT_ENDPOINT", "MEZZO_FRAMEWORK_ID", "MEZZO_EXECUTOR_ID", "MEZZO_SANDBOX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEZZO_FRAMEWORK_ID", "fw-1")
    with pytest.raises(RuntimeError, match="MEZZO_AGENT_ENDPOINT, MEZZO_EXECUTOR_ID, MEZZO_SANDBOX not set"):
        mezzo.ExecutorDriver(Worker())


def test_registers_launches_and_reports_with_uuids(agent, environment, cleanup, tmp_path):
    agent.to_launch = [a_task("t1"), a_task("t2")]
    worker = Worker()
    driver = mezzo.ExecutorDriver(worker, reconnect_interval=0.05)
    cleanup(driver)
    assert driver.sandbox == tmp_path and driver.executor_id == "ex-1"
    driver.start()
    assert agent.wait_for("register_executor") == [("fw-1", "ex-1", "tok-1")]  # the token it was given
    ((info, framework, agent_info),) = worker.wait("registered")
    assert info.executor_id == "ex-1" and framework.framework_id == "fw-1"
    assert isinstance(agent_info.resources, mezzo.Resources) and agent_info.resources.get("cpus") == 4
    tasks = [t for (t,) in worker.wait("launch_task", 2)]
    assert [t.task_id for t in tasks] == ["t1", "t2"]
    assert isinstance(tasks[0].resources, mezzo.Resources) and tasks[0].data == b"payload"

    updates = [s for (s,) in agent.wait_for("executor_status_update", 2)]
    assert [u.task_id for u in updates] == ["t1", "t2"]
    for u in updates:
        assert len(u.uuid) == 32 and int(u.uuid, 16) >= 0
        assert (u.source, u.executor_id, u.framework_id, u.agent_id) == (
            "executor",
            "ex-1",
            "fw-1",
            "agent-1",
        )
        assert u.state == mezzo.TaskState.TASK_RUNNING and abs(u.timestamp - time.time()) < 5
    assert updates[0].uuid != updates[1].uuid
    wait_until(lambda: driver.unacknowledged == 0, what="acknowledgements")


def test_messages_and_kills(agent, environment, cleanup):
    worker = Worker()
    driver = mezzo.ExecutorDriver(worker, reconnect_interval=0.05)
    cleanup(driver)
    driver.start()
    worker.wait("registered")
    agent.send("framework_message", b"hello executor")
    agent.send("kill_task", "t7")
    assert worker.wait("framework_message") == [(b"hello executor",)]
    assert worker.wait("kill_task") == [("t7",)]
    assert driver.send_framework_message(b"hello scheduler") is DriverStatus.RUNNING
    assert agent.wait_for("executor_to_framework") == [("fw-1", "ex-1", b"hello scheduler")]
    with pytest.raises(ValueError):
        driver.send_status_update(mezzo.TaskStatus(task_id="t1", state=mezzo.TaskState.TASK_STAGING))


def test_unacknowledged_updates_are_resent_after_reconnect_and_shutdown_ends_run(agent, environment):
    agent.ack = False
    agent.to_launch = [a_task("t1")]
    worker = Worker()
    driver = mezzo.ExecutorDriver(worker, reconnect_interval=0.05)
    thread, result = run_in_thread(driver)
    ((first,),) = agent.wait_for("executor_status_update")
    assert driver.unacknowledged == 1

    agent.stop()
    time.sleep(0.15)  # the agent is down for a few redials
    agent.ack = True
    agent.start()
    assert len(agent.wait_for("register_executor", 2)) == 2
    (_, (again,)) = agent.wait_for("executor_status_update", 2)
    assert again.uuid == first.uuid and again.task_id == "t1"
    wait_until(lambda: driver.unacknowledged == 0, what="the re-sent update to be acknowledged")
    assert len(worker.of("registered")) == 1  # re-registration is not reported again

    agent.send("shutdown")
    thread.join(5)
    assert result["status"] is DriverStatus.STOPPED
    assert worker.of("shutdown") == [()]


def test_stop_waits_for_outstanding_acknowledgements(agent, environment):
    agent.ack = False
    driver = mezzo.ExecutorDriver(Worker(), reconnect_interval=0.05, linger=3.0)
    driver.start()
    agent.wait_for("register_executor")
    driver.send_status_update(mezzo.TaskStatus(task_id="t1", state=mezzo.TaskState.TASK_FINISHED))
    ((update,),) = agent.wait_for("executor_status_update")

    def ack_late():
        time.sleep(0.2)
        agent.send("status_update_acknowledged", update.task_id, update.uuid)

    threading.Thread(target=ack_late).start()
    started = time.monotonic()
    assert driver.stop() is DriverStatus.STOPPED
    took = time.monotonic() - started
    assert 0.15 < took < 2.0
    assert driver.unacknowledged == 0
    assert driver.join() is DriverStatus.STOPPED


def test_stop_lingers_only_so_long(agent, environment):
    agent.ack = False
    driver = mezzo.ExecutorDriver(Worker(), reconnect_interval=0.05, linger=0.2)
    driver.start()
    agent.wait_for("register_executor")
    driver.send_status_update(mezzo.TaskStatus(task_id="t1", state=mezzo.TaskState.TASK_FINISHED))
    agent.wait_for("executor_status_update")
    started = time.monotonic()
    assert driver.stop() is DriverStatus.STOPPED
    assert time.monotonic() - started < 1.5
    assert driver.unacknowledged == 1


def test_unreachable_agent_errors_then_shuts_down(agent, environment):
    worker = Worker()
    driver = mezzo.ExecutorDriver(worker, reconnect_interval=0.05, recovery_timeout=0.3)
    driver.start()
    worker.wait("registered")
    agent.stop()
    assert driver.join() is DriverStatus.ABORTED
    ((message,),) = worker.of("error")
    assert "unreachable" in message
    assert [name for name, _ in worker.events][-2:] == ["error", "shutdown"]


EXECUTOR_PROGRAM = textwrap.dedent(
    """
    import mezzo

    class Once(mezzo.Executor):
        def launch_task(self, driver, task):
            driver.send_status_update(mezzo.TaskStatus(task_id=task.task_id,
                                                       state=mezzo.TaskState.TASK_FINISHED))

    status = mezzo.ExecutorDriver(Once()).run()
    raise SystemExit(0 if status == mezzo.driver.DriverStatus.STOPPED else 3)
    """
)


def test_executor_process_exits_after_shutdown(agent, environment):
    """A real executor process: registers, finishes its task, exits when told to shut down."""
    agent.to_launch = [a_task("t1")]

    def shutdown_when_finished(conn, status):
        conn.remote(EXECUTOR).status_update_acknowledged(status.task_id, status.uuid)
        if status.state == mezzo.TaskState.TASK_FINISHED:
            conn.remote(EXECUTOR).shutdown()

    agent.on_executor_status_update = shutdown_when_finished
    proc = subprocess.run(
        [sys.executable, "-c", EXECUTOR_PROGRAM],
        env=dict(os.environ),
        capture_output=True,
        timeout=20,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode() + proc.stdout.decode()
    ((update,),) = agent.of("executor_status_update")
    assert (update.task_id, update.state, update.source) == ("t1", mezzo.TaskState.TASK_FINISHED, "executor")


def test_driver_error_is_a_runtime_error():
    assert issubclass(DriverError, RuntimeError) and issubclass(DriverError, mezzo.errors.MezzoError)
