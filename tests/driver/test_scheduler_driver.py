"""SchedulerDriver against a scripted master over real loopback sockets."""

from __future__ import annotations

import threading
import time

import mezzo
import pytest
from mezzo.driver import DriverError, DriverStatus
from mezzo.driver.runtime import THREAD_NAME
from mezzo.wire import ttypes as wire
from scripted_peers import ScriptedMaster, wait_count, wait_until


class Events(mezzo.Scheduler):
    """Records every callback as ``(name, args)`` plus the thread it ran on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, tuple]] = []
        self.threads: set[str] = set()

    def _note(self, name, *args):
        with self.lock:
            self.events.append((name, args))
            self.threads.add(threading.current_thread().name)

    def of(self, name):
        with self.lock:
            return [args for n, args in self.events if n == name]

    def wait(self, name, count=1, timeout=5.0):
        return wait_count(lambda: self.of(name), count, timeout, name)

    def registered(self, driver, framework_id, master):
        self._note("registered", framework_id, master)

    def reregistered(self, driver, framework_id, master):
        self._note("reregistered", framework_id, master)

    def disconnected(self, driver):
        self._note("disconnected")

    def resource_offers(self, driver, offers):
        self._note("resource_offers", offers)

    def offer_rescinded(self, driver, offer_id):
        self._note("offer_rescinded", offer_id)

    def status_update(self, driver, status):
        self._note("status_update", status)

    def framework_message(self, driver, agent_id, executor_id, data):
        self._note("framework_message", agent_id, executor_id, data)

    def agent_lost(self, driver, agent_id):
        self._note("agent_lost", agent_id)

    def executor_lost(self, driver, agent_id, executor_id, status):
        self._note("executor_lost", agent_id, executor_id, status)

    def error(self, driver, message):
        self._note("error", message)


def start_driver(master, cleanup, scheduler=None, **kw):
    scheduler = scheduler or Events()
    kw.setdefault("reconnect_interval", 0.05)
    driver = mezzo.SchedulerDriver(scheduler, mezzo.FrameworkInfo(name="test"), master.address, **kw)
    cleanup(driver)
    assert driver.start() is DriverStatus.RUNNING
    return driver, scheduler


def registered(master, cleanup, scheduler=None, **kw):
    driver, sched = start_driver(master, cleanup, scheduler, **kw)
    wait_until(lambda: driver.connected, what="registration")
    return driver, sched


def offer(offer_id="o1", agent_id="a1"):
    # Plain wire Resources, as the master's encoder would produce them.
    return wire.Offer(
        offer_id=offer_id,
        framework_id="fw-1",
        agent_id=agent_id,
        hostname="node-1",
        resources=wire.Resources(
            scalars={"cpus": 2000, "mem": 1024000}, ranges={"ports": [wire.Range(31000, 31009)]}
        ),
    )


def status(task_id="t1", uuid="u1", state=mezzo.TaskState.TASK_RUNNING, agent_id="a1"):
    return mezzo.TaskStatus(task_id=task_id, state=state, agent_id=agent_id, uuid=uuid, source="agent")


# -- registration ------------------------------------------------------------------


def test_registers_and_reports_framework_id(master, cleanup):
    driver, sched = start_driver(master, cleanup)
    ((fid, where),) = sched.wait("registered")
    assert fid == "fw-1" and where == "master@" + master.address
    assert driver.framework_id == "fw-1" and driver.connected
    ((info,),) = master.of("register_framework")
    assert info.name == "test" and info.framework_id == ""
    assert info.user and info.hostname  # filled in from this process
    assert sched.threads == {THREAD_NAME}


def test_start_twice_and_actions_before_start(master, cleanup):
    driver = mezzo.SchedulerDriver(Events(), mezzo.FrameworkInfo(name="x"), master.address)
    cleanup(driver)
    assert driver.kill_task("t1") is DriverStatus.NOT_STARTED
    assert driver.join() is DriverStatus.NOT_STARTED
    assert driver.start() is DriverStatus.RUNNING
    assert driver.start() is DriverStatus.RUNNING
    wait_until(lambda: driver.connected)
    assert len(master.of("register_framework")) == 1


@pytest.mark.parametrize(
    "address, words",
    [
        ("zk://127.0.0.1:2181", "a path is required"),
        ("zk://nohostport/mezzo", "is not HOST:PORT"),
        ("", "empty"),
        ("http://x:1", "HOST:PORT"),
        ("h:notaport", "port"),
    ],
)
def test_bad_master_addresses(address, words):
    with pytest.raises(ValueError, match=words):
        mezzo.SchedulerDriver(Events(), mezzo.FrameworkInfo(name="x"), address)


# -- offers, launches, declines ------------------------------------------------------------


def test_offers_arrive_with_resources(master, cleanup):
    _, sched = registered(master, cleanup)
    master.send("resource_offers", [offer("o1"), offer("o2", "a2")])
    ((offers,),) = sched.wait("resource_offers")
    assert [o.offer_id for o in offers] == ["o1", "o2"]
    res = offers[0].resources
    assert isinstance(res, mezzo.Resources)
    assert res == mezzo.Resources(cpus=2, mem=1024, ranges={"ports": [(31000, 31009)]})
    assert res.get("cpus") == 2.0

    master.send("offer_rescinded", "o2")
    assert sched.wait("offer_rescinded") == [("o2",)]


def test_launch_tasks_from_a_callback_encodes_what_the_master_expects(master, cleanup):
    class Launcher(Events):
        def resource_offers(self, driver, offers):
            super().resource_offers(driver, offers)
            o = offers[0]
            task = mezzo.TaskInfo(
                task_id="t1",
                agent_id=o.agent_id,
                resources=mezzo.Resources(cpus=1, mem=64),
                command=mezzo.CommandInfo(value="echo hi"),
            )
            driver.launch_tasks(o.offer_id, [task])

    registered(master, cleanup, Launcher())
    master.send("resource_offers", [offer("o1")])
    ((fid, offer_ids, tasks, filters),) = master.wait_for("launch_tasks")
    assert (fid, offer_ids) == ("fw-1", ["o1"])
    assert filters is None  # unset: the master applies its configured refuse_seconds
    (task,) = tasks
    assert (task.task_id, task.agent_id, task.command.value) == ("t1", "a1", "echo hi")
    assert task.resources.scalars == {"cpus": 1000, "mem": 64000}


def test_launch_and_decline_from_another_thread(master, cleanup):
    driver, sched = registered(master, cleanup)
    master.send("resource_offers", [offer("o1"), offer("o2"), offer("o3")])
    ((offers,),) = sched.wait("resource_offers")
    task = mezzo.TaskInfo(task_id="t2", agent_id="a1", resources=mezzo.Resources(cpus=0.5))
    assert driver.launch_tasks(offers[:2], task, mezzo.Filters(refuse_seconds=30)) is DriverStatus.RUNNING
    assert driver.decline_offer("o3") is DriverStatus.RUNNING
    assert driver.decline_offer(["o4", "o5"], mezzo.Filters(refuse_seconds=1)) is DriverStatus.RUNNING
    ((fid, ids, tasks, filters),) = master.wait_for("launch_tasks")
    assert (fid, ids, [t.task_id for t in tasks], filters.refuse_seconds) == (
        "fw-1",
        ["o1", "o2"],
        ["t2"],
        30.0,
    )
    declines = master.wait_for("decline_offer", 2)
    assert declines == [("fw-1", ["o3"], None), ("fw-1", ["o4", "o5"], mezzo.Filters(1.0))]
    with pytest.raises(TypeError):
        driver.launch_tasks("o1", ["not a task"])


def test_launch_while_not_registered_answers_task_dropped(peer_loop, cleanup):
    silent = ScriptedMaster(peer_loop, answer_registration=False).start()
    try:
        driver, sched = start_driver(silent, cleanup)
        silent.wait_for("register_framework")
        task = mezzo.TaskInfo(task_id="t1", agent_id="a1", resources=mezzo.Resources(cpus=1))
        assert driver.launch_tasks("o1", [task]) is DriverStatus.RUNNING
        driver.decline_offer("o2")
        ((st,),) = sched.wait("status_update")
        assert (st.task_id, st.state, st.reason, st.uuid) == (
            "t1",
            mezzo.TaskState.TASK_DROPPED,
            "master_disconnected",
            "",
        )
        assert driver.kill_task("t0") is DriverStatus.RUNNING  # held until registered
        time.sleep(0.05)
        assert silent.of("launch_tasks") == [] and silent.of("decline_offer") == []
        assert silent.of("kill_task") == []
        silent.send("registered", "fw-7", "master@late")
        assert silent.wait_for("kill_task") == [("fw-7", "t0")]
        assert sched.wait("registered") == [("fw-7", "master@late")]
    finally:
        silent.stop()


def test_other_actions_encode_with_the_framework_id(master, cleanup):
    driver, _ = registered(master, cleanup)
    driver.kill_task("t1")
    driver.set_needs_offers(False)
    filters = mezzo.FrameworkFilters(agents=["a1"], min_free=mezzo.Resources(cpus=1))
    driver.set_filters(filters)
    driver.reconcile_tasks([mezzo.TaskStatus(task_id="t1", agent_id="a1")])
    driver.reconcile_tasks()
    driver.send_framework_message("ex-1", "a1", b"ping")
    assert master.wait_for("kill_task") == [("fw-1", "t1")]
    assert master.wait_for("set_needs_offers") == [("fw-1", False)]
    ((fid, got),) = master.wait_for("set_filters")
    assert fid == "fw-1" and got.agents == ["a1"] and got.min_free.scalars == {"cpus": 1000}
    rec = master.wait_for("reconcile_tasks", 2)
    assert [(f, [s.task_id for s in sts]) for f, sts in rec] == [("fw-1", ["t1"]), ("fw-1", [])]
    assert master.wait_for("framework_to_executor") == [("fw-1", "a1", "ex-1", b"ping")]


def test_callbacks_for_master_notices(master, cleanup):
    _, sched = registered(master, cleanup)
    master.send("framework_message", "a1", "ex-1", b"hello")
    master.send("agent_lost", "a2")
    master.send("executor_lost", "a1", "ex-1", 137)
    assert sched.wait("framework_message") == [("a1", "ex-1", b"hello")]
    assert sched.wait("agent_lost") == [("a2",)]
    assert sched.wait("executor_lost") == [("a1", "ex-1", 137)]


# -- status updates and acknowledgements ---------------------------------------------


def test_implicit_ack_after_callback_once_per_uuid(master, cleanup):
    acks_seen_in_callback = []

    class Slow(Events):
        def status_update(self, driver, st):
            super().status_update(driver, st)
            time.sleep(0.05)
            acks_seen_in_callback.append(len(master.of("acknowledge_status_update")))

    _, sched = registered(master, cleanup, Slow())
    master.send("status_update", status(uuid="u1"))
    master.send("status_update", status(uuid="u1"))  # a retry by the agent
    master.send("status_update", status(task_id="t2", uuid="", state=mezzo.TaskState.TASK_ERROR))
    master.send("status_update", status(uuid="u2", state=mezzo.TaskState.TASK_FINISHED))
    sched.wait("status_update", 3)
    master.wait_for("acknowledge_status_update", 3)
    time.sleep(0.1)
    delivered = sched.of("status_update")
    assert [(s.task_id, s.uuid) for (s,) in delivered] == [("t1", "u1"), ("t2", ""), ("t1", "u2")]
    assert delivered[0][0].state is mezzo.TaskState.TASK_RUNNING
    # u1 acknowledged once for the delivery and once more for the duplicate; nothing for "".
    assert master.of("acknowledge_status_update") == [
        ("fw-1", "a1", "t1", "u1"),
        ("fw-1", "a1", "t1", "u1"),
        ("fw-1", "a1", "t1", "u2"),
    ]
    assert acks_seen_in_callback[0] == 0  # the ack left only after the callback returned


def test_status_update_callback_that_raises_is_redelivered(master, cleanup):
    class Flaky(Events):
        failed = False

        def status_update(self, driver, st):
            if not self.failed:
                self.failed = True
                raise RuntimeError("boom")
            super().status_update(driver, st)

    driver, sched = registered(master, cleanup, Flaky())
    master.send("status_update", status(uuid="u1"))
    time.sleep(0.1)
    assert master.of("acknowledge_status_update") == []
    master.send("status_update", status(uuid="u1"))
    assert len(sched.wait("status_update")) == 1
    assert master.wait_for("acknowledge_status_update") == [("fw-1", "a1", "t1", "u1")]
    assert driver.status is DriverStatus.RUNNING


def test_explicit_acknowledgements(master, cleanup):
    driver, sched = registered(master, cleanup, implicit_acknowledgements=False)
    master.send("status_update", status(uuid="u1"))
    ((st,),) = sched.wait("status_update")
    master.send("status_update", status(uuid="u1"))  # retry before we acknowledged
    time.sleep(0.1)
    assert master.of("acknowledge_status_update") == []
    assert len(sched.of("status_update")) == 1
    assert driver.acknowledge_status_update(st) is DriverStatus.RUNNING
    assert master.wait_for("acknowledge_status_update") == [("fw-1", "a1", "t1", "u1")]
    master.send("status_update", status(uuid="u1"))  # our ack was lost: answer again
    master.wait_for("acknowledge_status_update", 2)
    assert len(sched.of("status_update")) == 1
    # Master-made updates need no acknowledgement.
    assert driver.acknowledge_status_update(status(uuid="")) is DriverStatus.RUNNING


def test_explicit_ack_refused_with_implicit_acks(master, cleanup):
    driver, _ = registered(master, cleanup)
    with pytest.raises(RuntimeError, match="implicit"):
        driver.acknowledge_status_update(status())


# -- guaranteed share ----------------------------------------------------------------------


def test_guaranteed_share_round_trip(master, cleanup):
    driver, _ = registered(master, cleanup)
    assert driver.guaranteed_share() == mezzo.Resources(cpus=2, mem=1024)
    ((fid, request_id),) = master.of("request_guaranteed_share")
    assert fid == "fw-1" and request_id > 0
    master.answer_guaranteed_share = False
    with pytest.raises(TimeoutError):
        driver.guaranteed_share(timeout=0.1)


def test_guaranteed_share_on_the_driver_thread_raises(master, cleanup):
    errors = []

    class Asker(Events):
        def registered(self, driver, framework_id, master_name):
            try:
                driver.guaranteed_share()
            except RuntimeError as exc:
                errors.append(exc)
            try:
                driver.join()
            except RuntimeError as exc:
                errors.append(exc)
            super().registered(driver, framework_id, master_name)

    _, sched = start_driver(master, cleanup, Asker())
    sched.wait("registered")
    assert len(errors) == 2
    assert isinstance(errors[0], DriverError) and "another thread" in str(errors[0])
    assert "join()" in str(errors[1])


def test_guaranteed_share_fails_when_driver_stops(master, cleanup):
    driver, _ = registered(master, cleanup)
    master.answer_guaranteed_share = False
    threading.Timer(0.1, driver.stop).start()
    with pytest.raises(RuntimeError, match="stopped"):
        driver.guaranteed_share(timeout=5)


# -- connection loss, errors, stopping --------------------------------------------------------


def test_reconnects_and_reregisters_after_master_restart(master, cleanup):
    driver, sched = registered(master, cleanup)
    driver.set_needs_offers(False)
    master.wait_for("set_needs_offers")
    master.stop()
    sched.wait("disconnected")
    assert not driver.connected
    # While disconnected: kills are held for the next registration, declines dropped.
    assert driver.kill_task("t9") is DriverStatus.RUNNING
    driver.decline_offer("o1")
    time.sleep(0.15)  # a few failed redials
    master.start()
    assert sched.wait("reregistered") == [("fw-1", "master@" + master.address)]
    info = master.of("register_framework")[-1][0]
    assert info.framework_id == "fw-1"
    assert master.wait_for("kill_task") == [("fw-1", "t9")]
    assert master.wait_for("set_needs_offers", 2)[-1] == ("fw-1", False)
    assert master.of("decline_offer") == []
    assert len(sched.of("registered")) == 1 and len(sched.of("disconnected")) == 1


def test_master_error_aborts(master, cleanup):
    driver, sched = registered(master, cleanup)
    master.send("error", "framework refused: role 'x' is unknown")
    assert driver.join() is DriverStatus.ABORTED
    assert sched.of("error") == [("framework refused: role 'x' is unknown",)]
    assert driver.kill_task("t1") is DriverStatus.ABORTED
    assert driver.start() is DriverStatus.ABORTED
    time.sleep(0.1)
    assert master.of("unregister_framework") == []
    assert len(master.of("register_framework")) == 1  # no redial after abort


def test_stop_without_failover_unregisters(master, cleanup):
    driver, _ = registered(master, cleanup)
    assert driver.stop() is DriverStatus.STOPPED
    assert master.wait_for("unregister_framework") == [("fw-1",)]
    assert driver.join() is DriverStatus.STOPPED
    assert driver.stop() is DriverStatus.STOPPED
    wait_until(lambda: not master.conns, what="the connection to close")


def test_stop_with_failover_only_disconnects(master, cleanup):
    driver, _ = registered(master, cleanup)
    assert driver.stop(failover=True) is DriverStatus.STOPPED
    wait_until(lambda: not master.conns, what="the connection to close")
    assert master.of("unregister_framework") == []
    assert driver.join() is DriverStatus.STOPPED


def test_run_returns_when_a_callback_stops_the_driver(master):
    class OneShot(Events):
        def registered(self, driver, framework_id, master_name):
            super().registered(driver, framework_id, master_name)
            driver.stop()

    sched = OneShot()
    driver = mezzo.SchedulerDriver(sched, mezzo.FrameworkInfo(name="once"), master.address)
    assert driver.run() is DriverStatus.STOPPED
    assert master.wait_for("unregister_framework") == [("fw-1",)]


def test_terminal_update_is_acknowledged_even_when_the_callback_stops(master):
    class Finisher(Events):
        def status_update(self, driver, st):
            super().status_update(driver, st)
            if mezzo.is_terminal(st.state):
                driver.stop()

    driver = mezzo.SchedulerDriver(Finisher(), mezzo.FrameworkInfo(name="f"), master.address)
    driver.start()
    wait_until(lambda: driver.connected)
    master.send("status_update", status(uuid="u9", state=mezzo.TaskState.TASK_FINISHED))
    assert driver.join() is DriverStatus.STOPPED
    master.wait_for("unregister_framework")
    with master.lock:
        names = [n for n, _ in master.calls]
    assert names[-2:] == ["acknowledge_status_update", "unregister_framework"]


def test_actions_from_many_threads(master, cleanup):
    driver, _ = registered(master, cleanup)

    def kill(prefix):
        for i in range(100):
            driver.kill_task(f"{prefix}-{i}")

    threads = [threading.Thread(target=kill, args=(p,)) for p in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kills = master.wait_for("kill_task", 400)
    for p in "abcd":  # per calling thread, order is kept
        assert [tid for _, tid in kills if tid.startswith(p)] == [f"{p}-{i}" for i in range(100)]


# -- scale: one thread for all drivers -----------------------------------------------------------


def test_200_drivers_share_one_thread(master):
    before = {t.ident for t in threading.enumerate()}
    drivers = [
        mezzo.SchedulerDriver(Events(), mezzo.FrameworkInfo(name=f"f{i}"), master.address) for i in range(200)
    ]
    try:
        for d in drivers:
            d.start()
        wait_until(lambda: all(d.connected for d in drivers), 15, "200 registrations")
        new = [t for t in threading.enumerate() if t.ident not in before]
        assert len(new) <= 1, [t.name for t in new]  # at most the driver thread, if not started before
        assert [t.name for t in threading.enumerate()].count(THREAD_NAME) == 1
        assert len({d.framework_id for d in drivers}) == 200
        threads = set().union(*(d.scheduler.threads for d in drivers))
        assert threads == {THREAD_NAME}
    finally:
        for d in drivers:
            d.stop()
    assert len(master.wait_for("unregister_framework", 200)) == 200
