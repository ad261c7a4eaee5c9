"""check_launch: every rule of the launch_tasks validation, on hand-built records."""

from __future__ import annotations

import pytest
from mezzo.master import launch as L
from mezzo.master.launch import check_launch
from mezzo.master.records import AgentRecord, FrameworkRecord, OfferRecord, TaskRecord
from mezzo.resources import Resources
from mezzo.wire import ttypes
from mezzo.wire.ttypes import AgentInfo, CommandInfo, ExecutorInfo, FrameworkInfo, Range, TaskInfo, TaskState

DROPPED = TaskState.TASK_DROPPED
ERROR = TaskState.TASK_ERROR


def framework(fid="fw-1") -> FrameworkRecord:
    return FrameworkRecord(id=fid, info=FrameworkInfo(name="f", framework_id=fid), conn=None)


def agent(aid, connected=True) -> AgentRecord:
    total = Resources.parse("cpus:8;mem:8192;ports:[31000-32000]")
    info = AgentInfo(agent_id=aid, hostname=f"{aid}.example", port=5051, resources=total)
    return AgentRecord(id=aid, info=info, conn=None, total=total, free=Resources(), connected=connected)


def offer(oid, fid, aid, res) -> OfferRecord:
    return OfferRecord(id=oid, framework_id=fid, agent_id=aid, resources=Resources.parse(res), expires_at=1e9)


class World:
    def __init__(self) -> None:
        self.fw = framework("fw-1")
        self.agents = {
            "ag-1": agent("ag-1"),
            "ag-2": agent("ag-2"),
            "ag-off": agent("ag-off", connected=False),
        }
        self.offers = {
            o.id: o
            for o in [
                offer("O1", "fw-1", "ag-1", "cpus:2;mem:1024;ports:[31000-31010]"),
                offer("O2", "fw-1", "ag-1", "cpus:1;mem:512"),
                offer("O3", "fw-2", "ag-1", "cpus:4;mem:4096"),
                offer("O4", "fw-1", "ag-2", "cpus:4;mem:4096"),
                offer("O5", "fw-1", "ag-off", "cpus:4;mem:4096"),
                offer("O6", "fw-1", "ag-gone", "cpus:4;mem:4096"),
            ]
        }

    def check(self, offer_ids, tasks):
        return check_launch(self.fw, offer_ids, tasks, self.offers, self.agents)


@pytest.fixture
def w() -> World:
    return World()


def task(
    tid="t1", res="cpus:0.5;mem:128", agent_id="ag-1", command="sleep 10", executor=None, resources=None
):
    return TaskInfo(
        task_id=tid,
        agent_id=agent_id,
        resources=resources if resources is not None else Resources.parse(res),
        command=CommandInfo(value=command) if command is not None else None,
        executor=executor,
    )


def executor(eid="ex-1", res="cpus:0.1;mem:32", command="./run-executor", resources=None):
    return ExecutorInfo(
        executor_id=eid,
        command=CommandInfo(value=command) if command is not None else None,
        resources=resources if resources is not None else Resources.parse(res),
    )


def exec_task(tid, eid="ex-1", res="cpus:0.5;mem:128", **kw):
    return task(tid, res=res, command=None, executor=executor(eid, **kw))


def only(plan):
    assert len(plan.rejected) == 1, plan.rejected
    return plan.rejected[0]


# ----------------------------------------------------------- the happy path


def test_valid_launch_on_two_offers_of_one_agent(w):
    tasks = [task("t1", "cpus:2;mem:1000"), task("t2", "cpus:1;mem:500;ports:[31005-31006]")]
    plan = w.check(["O1", "O2"], tasks)
    assert plan.rejected == []
    assert [a.task.task_id for a in plan.accepted] == ["t1", "t2"]
    assert plan.agent is w.agents["ag-1"]
    assert [o.id for o in plan.offers] == ["O1", "O2"]
    assert plan.offered == Resources.parse("cpus:3;mem:1536;ports:[31000-31010]")
    assert plan.used == Resources.parse("cpus:3;mem:1500;ports:[31005-31006]")
    assert plan.accepted[0].resources == Resources(cpus=2, mem=1000)
    assert plan.accepted[0].executor_resources is None
    assert isinstance(plan.accepted[1].resources, Resources)


def test_wire_resources_are_lifted(w):
    wire = ttypes.Resources(scalars={"cpus": 500, "mem": 64000}, ranges={"ports": [Range(31000, 31000)]})
    plan = w.check(["O1"], [task("t1", resources=wire)])
    assert plan.rejected == []
    assert plan.accepted[0].resources == Resources(cpus=0.5, mem=64, ranges={"ports": [(31000, 31000)]})


def test_no_tasks_consumes_offers(w):
    plan = w.check(["O1", "O2"], [])
    assert plan.accepted == [] and plan.rejected == []
    assert [o.id for o in plan.offers] == ["O1", "O2"]
    assert plan.used.is_empty()


def test_none_tasks_are_ignored(w):
    plan = w.check(["O1"], [None, task("t1"), None])
    assert [a.task.task_id for a in plan.accepted] == ["t1"] and plan.rejected == []


# ----------------------------------------------------------- rule 1: offers


def assert_all_dropped(plan, tasks, reason, *words):
    assert plan.accepted == []
    assert [s.task_id for s in plan.rejected] == [t.task_id for t in tasks]
    for s in plan.rejected:
        assert s.state == DROPPED
        assert s.reason == reason
        assert s.source == "master"
        assert s.framework_id == "fw-1"
        for word in words:
            assert word in s.message


@pytest.mark.parametrize(
    "offer_ids,bad",
    [
        (["nope"], "nope"),
        (["O1", "nope"], "nope"),
        (["O3"], "O3"),  # another framework's offer
        (["O1", "O1"], "O1"),  # repeated
        (["O1", "O2", "O3"], "O3"),
    ],
)
def test_unknown_foreign_or_repeated_offer_drops_every_task(w, offer_ids, bad):
    tasks = [task("t1"), task("t2")]
    plan = w.check(offer_ids, tasks)
    assert_all_dropped(plan, tasks, L.OFFER_UNKNOWN, repr(bad))
    # valid offers of the framework are reported so the master can recover them
    assert [o.id for o in plan.offers] == [o for o in dict.fromkeys(offer_ids) if o in ("O1", "O2")]


def test_no_offer_drops_every_task(w):
    tasks = [task("t1")]
    plan = w.check([], tasks)
    assert_all_dropped(plan, tasks, L.OFFER_UNKNOWN)
    assert plan.offers == []


def test_offers_on_several_agents_drop_every_task(w):
    tasks = [task("t1"), task("t2", agent_id="ag-2")]
    plan = w.check(["O1", "O4"], tasks)
    assert_all_dropped(plan, tasks, L.OFFERS_ON_SEVERAL_AGENTS, "ag-1", "ag-2")
    assert {o.id for o in plan.offers} == {"O1", "O4"}
    assert plan.agent is None


@pytest.mark.parametrize("oid,aid", [("O5", "ag-off"), ("O6", "ag-gone")])
def test_disconnected_or_removed_agent_drops_every_task(w, oid, aid):
    tasks = [task("t1", agent_id=aid)]
    plan = w.check([oid], tasks)
    assert_all_dropped(plan, tasks, L.AGENT_GONE, aid)
    assert [o.id for o in plan.offers] == [oid]


def test_offer_rule_wins_over_task_rules(w):
    tasks = [task(""), task("t2", "cpus:100")]
    plan = w.check(["nope"], tasks)
    assert [s.reason for s in plan.rejected] == [L.OFFER_UNKNOWN] * 2


# ----------------------------------------------------------- rule 2: per task


def assert_error(status, tid, reason, *words):
    assert status.state == ERROR
    assert status.task_id == tid
    assert status.reason == reason
    assert status.source == "master"
    assert status.framework_id == "fw-1"
    assert status.agent_id == "ag-1"
    for word in words:
        assert word in status.message, status.message


def launch_with_good_neighbour(w, bad_task, offers=("O1",)):
    """The bad task is rejected, the good one in the same batch still launches."""
    plan = w.check(list(offers), [bad_task, task("good", "cpus:0.5;mem:64")])
    assert [a.task.task_id for a in plan.accepted] == ["good"]
    return only(plan)


@pytest.mark.parametrize("tid", ["", "   ", None])
def test_empty_task_id(w, tid):
    s = launch_with_good_neighbour(w, task(tid))
    assert_error(s, "" if tid is None else tid, L.INVALID_TASK_ID)


def test_task_id_in_use_by_the_framework(w):
    t = task("running")
    w.fw.tasks["running"] = TaskRecord(
        framework_id="fw-1", agent_id="ag-2", info=t, resources=Resources(cpus=1)
    )
    s = launch_with_good_neighbour(w, task("running"))
    assert_error(s, "running", L.DUPLICATE_TASK_ID, "'running'")


def test_task_id_repeated_in_the_batch(w):
    plan = w.check(["O1"], [task("t1"), task("t1"), task("t2")])
    assert [a.task.task_id for a in plan.accepted] == ["t1", "t2"]
    assert_error(only(plan), "t1", L.DUPLICATE_TASK_ID)


def test_task_for_another_agent(w):
    s = launch_with_good_neighbour(w, task("t1", agent_id="ag-2"))
    assert_error(s, "t1", L.WRONG_AGENT, "ag-2", "ag-1")


@pytest.mark.parametrize(
    "wire",
    [
        ttypes.Resources(scalars={"cpus": -500}),
        ttypes.Resources(scalars={"cpus": 500}, ranges={"ports": [Range(31010, 31000)]}),
        ttypes.Resources(scalars={"cpus": 500}, ranges={"ports": [Range(-1, 3)]}),
    ],
)
def test_insane_task_resources(w, wire):
    s = launch_with_good_neighbour(w, task("t1", resources=wire))
    assert_error(s, "t1", L.INVALID_RESOURCES, "task resources")


@pytest.mark.parametrize("wire", [None, ttypes.Resources(), ttypes.Resources(scalars={"cpus": 0})])
def test_task_without_resources(w, wire):
    t = task("t1")
    t.resources = wire
    s = launch_with_good_neighbour(w, t)
    assert_error(s, "t1", L.INVALID_RESOURCES)


def test_neither_command_nor_executor(w):
    s = launch_with_good_neighbour(w, task("t1", command=None))
    assert_error(s, "t1", L.INVALID_COMMAND, "exactly one")


def test_both_command_and_executor(w):
    s = launch_with_good_neighbour(w, task("t1", executor=executor()))
    assert_error(s, "t1", L.INVALID_COMMAND, "exactly one")


@pytest.mark.parametrize("value", ["", "  \t", None])
def test_empty_command_value(w, value):
    t = task("t1")
    t.command.value = value
    s = launch_with_good_neighbour(w, t)
    assert_error(s, "t1", L.INVALID_COMMAND)


@pytest.mark.parametrize("eid", ["", " ", None])
def test_executor_without_id(w, eid):
    t = exec_task("t1")
    t.executor.executor_id = eid
    s = launch_with_good_neighbour(w, t)
    assert_error(s, "t1", L.INVALID_EXECUTOR)


@pytest.mark.parametrize("command", [None, "", "   "])
def test_executor_without_command(w, command):
    s = launch_with_good_neighbour(w, exec_task("t1", command=command))
    assert_error(s, "t1", L.INVALID_EXECUTOR, "'ex-1'")


def test_executor_with_insane_resources(w):
    s = launch_with_good_neighbour(w, exec_task("t1", resources=ttypes.Resources(scalars={"mem": -1})))
    assert_error(s, "t1", L.INVALID_RESOURCES, "executor 'ex-1'")


def test_executor_already_on_agent_is_still_validated(w):
    w.agents["ag-1"].executors[("fw-1", "ex-1")] = executor()
    s = launch_with_good_neighbour(
        w, exec_task("t1", resources=ttypes.Resources(ranges={"ports": [Range(5, 1)]}))
    )
    assert_error(s, "t1", L.INVALID_RESOURCES)


def test_task_larger_than_offers(w):
    s = launch_with_good_neighbour(w, task("t1", "cpus:2.5;mem:100"), offers=("O1",))
    assert_error(s, "t1", L.INSUFFICIENT_RESOURCES, "cpus 2.5 > 2 available")


def test_ports_outside_the_offer(w):
    s = launch_with_good_neighbour(w, task("t1", "cpus:0.1;ports:[31010-31011]"))
    assert_error(s, "t1", L.INSUFFICIENT_RESOURCES, "ports")


def test_tasks_consume_what_is_left_in_order(w):
    tasks = [task("a", "cpus:1.5;mem:100"), task("b", "cpus:1;mem:100"), task("c", "cpus:0.5;mem:100")]
    plan = w.check(["O1"], tasks)  # 2 cpus offered
    assert [x.task.task_id for x in plan.accepted] == ["a", "c"]
    assert_error(only(plan), "b", L.INSUFFICIENT_RESOURCES, "cpus 1 > 0.5 available")
    assert plan.used == Resources(cpus=2, mem=200)


def test_same_port_cannot_be_used_twice(w):
    tasks = [task("a", "cpus:0.1;ports:[31000-31000]"), task("b", "cpus:0.1;ports:[31000-31000]")]
    plan = w.check(["O1"], tasks)
    assert [x.task.task_id for x in plan.accepted] == ["a"]
    assert_error(only(plan), "b", L.INSUFFICIENT_RESOURCES)


def test_exact_fit_across_two_offers(w):
    plan = w.check(["O1", "O2"], [task("t", "cpus:3;mem:1536")])
    assert plan.rejected == [] and plan.used == Resources(cpus=3, mem=1536)


def test_new_executor_resources_count_once_per_batch(w):
    tasks = [exec_task("a", res="cpus:0.9;mem:100"), exec_task("b", res="cpus:0.9;mem:100")]
    plan = w.check(["O1"], tasks)  # 2 cpus: 0.9 + 0.1 executor + 0.9 fits
    assert plan.rejected == []
    assert plan.accepted[0].executor_resources == Resources(cpus=0.1, mem=32)
    assert plan.accepted[1].executor_resources is None
    assert plan.used == Resources(cpus=1.9, mem=232)


def test_executor_resources_make_the_task_not_fit(w):
    s = launch_with_good_neighbour(w, exec_task("a", res="cpus:1.95;mem:100"))
    assert_error(s, "a", L.INSUFFICIENT_RESOURCES, "cpus")


def test_running_executor_costs_nothing_more(w):
    w.agents["ag-1"].executors[("fw-1", "ex-1")] = executor()
    plan = w.check(["O1"], [exec_task("a", res="cpus:2;mem:1024")])
    assert plan.rejected == []
    assert plan.accepted[0].executor_resources is None


def test_executor_of_another_framework_on_the_agent_is_new(w):
    w.agents["ag-1"].executors[("fw-2", "ex-1")] = executor()
    plan = w.check(["O1"], [exec_task("a")])
    assert plan.accepted[0].executor_resources == Resources(cpus=0.1, mem=32)


def test_rejected_task_does_not_bring_its_executor(w):
    tasks = [exec_task("a", res="cpus:5"), exec_task("b", res="cpus:0.5")]
    plan = w.check(["O1"], tasks)
    assert [x.task.task_id for x in plan.accepted] == ["b"]
    assert plan.accepted[0].executor_resources == Resources(cpus=0.1, mem=32)


def test_first_failing_rule_answers(w):
    cases = [
        (task("", agent_id="ag-2", command=None), L.INVALID_TASK_ID),
        (task("x", agent_id="ag-2", resources=ttypes.Resources(scalars={"cpus": -1})), L.WRONG_AGENT),
        (task("y", resources=ttypes.Resources(scalars={"cpus": -1}), command=None), L.INVALID_RESOURCES),
        (task("z", "cpus:100", command=None), L.INVALID_COMMAND),
        (exec_task("v", res="cpus:100", command=None), L.INVALID_EXECUTOR),
    ]
    for t, reason in cases:
        assert only(w.check(["O1"], [t])).reason == reason, t.task_id


def test_check_launch_has_no_side_effects(w):
    before_offers = dict(w.offers)
    before_res = {oid: o.resources.to_dict() for oid, o in w.offers.items()}
    w.check(["O1", "O2"], [task("t1", "cpus:1"), exec_task("t2")])
    assert w.offers == before_offers
    assert {oid: o.resources.to_dict() for oid, o in w.offers.items()} == before_res
    assert w.fw.tasks == {} and w.agents["ag-1"].executors == {} and w.agents["ag-1"].tasks == {}


def test_task_data_over_the_limit_is_refused_and_the_rest_of_the_batch_launches(w):
    limits = L.TaskLimits(data_bytes=1024, metadata_bytes=1024)
    big, fits = task("big"), task("fits")
    big.data, fits.data = b"x" * 1025, b"x" * 1024
    plan = check_launch(w.fw, ["O1"], [big, fits], w.offers, w.agents, limits)
    s = only(plan)
    assert (s.task_id, s.state, s.reason) == ("big", ERROR, L.TASK_DATA_TOO_LARGE)
    assert "1025 bytes" in s.message and "master.max_task_data_bytes" in s.message
    assert [a.task.task_id for a in plan.accepted] == ["fits"]


def test_labels_arguments_and_environments_count_together_against_the_metadata_limit(w):
    limits = L.TaskLimits(data_bytes=1024, metadata_bytes=100)
    t = exec_task("meta")
    t.labels = {"k" * 20: "v" * 20}  # 40 bytes
    t.executor.command.arguments = ["a" * 30]  # 70
    t.executor.command.environment = {"E": "é" * 15}  # 1 + 30 (two bytes each) = 101
    s = only(check_launch(w.fw, ["O1"], [t], w.offers, w.agents, limits))
    assert (s.state, s.reason) == (ERROR, L.TASK_METADATA_TOO_LARGE) and "101 bytes" in s.message
    t.executor.command.environment = {"E": "é" * 14}  # 99: fits
    assert not check_launch(w.fw, ["O1"], [t], w.offers, w.agents, limits).rejected


def test_the_default_limits_are_one_mebibyte_of_data_and_64_kib_of_metadata(w):
    t = task("t")
    t.data = b"x" * (1024 * 1024 + 1)
    assert only(w.check(["O1"], [t])).reason == L.TASK_DATA_TOO_LARGE
    t = task("u")
    t.labels = {"k": "v" * (64 * 1024)}
    assert only(w.check(["O1"], [t])).reason == L.TASK_METADATA_TOO_LARGE


# -- task groups (the v1 façade's LAUNCH_GROUP): whole or not at all -------------------------


def check_groups(w, offer_ids, tasks, groups):
    return check_launch(w.fw, offer_ids, tasks, w.offers, w.agents, groups=groups)


def test_a_group_that_fits_launches_whole(w):
    tasks = [exec_task("g1", res="cpus:0.5"), exec_task("g2", res="cpus:0.5"), task("solo", "cpus:0.5")]
    plan = check_groups(w, ["O1"], tasks, [(0, 2)])
    assert plan.rejected == []
    assert [x.task.task_id for x in plan.accepted] == ["g1", "g2", "solo"]
    assert plan.used == Resources(cpus=1.6, mem=32)  # the executor brings the only memory


def test_a_group_whose_members_together_do_not_fit_launches_none_and_gives_back_what_they_took(w):
    # 2 cpus offered: g1 (1 cpu + the 0.1 executor) fits, g2 (1 cpu) then does not. The
    # group is refused whole, and the task after it gets what g1 had taken.
    tasks = [exec_task("g1", res="cpus:1"), exec_task("g2", res="cpus:1"), task("after", "cpus:1.9")]
    plan = check_groups(w, ["O1"], tasks, [(0, 2)])
    assert [x.task.task_id for x in plan.accepted] == ["after"]
    refused = {s.task_id: s for s in plan.rejected}
    assert set(refused) == {"g1", "g2"}
    assert_error(refused["g2"], "g2", L.INSUFFICIENT_RESOURCES)
    assert_error(refused["g1"], "g1", L.TASK_GROUP_INVALID, "another task of its group was refused (g2: ")
    assert plan.used == Resources(cpus=1.9)


def test_one_invalid_member_refuses_its_group_not_the_next_one(w):
    tasks = [
        exec_task("a1"),
        exec_task("a2", eid="ex-2", command=""),  # an executor with an empty command
        exec_task("b1", eid="ex-3"),
        exec_task("b2", eid="ex-3"),
    ]
    plan = check_groups(w, ["O1"], tasks, [(0, 2), (2, 4)])
    assert [x.task.task_id for x in plan.accepted] == ["b1", "b2"]
    assert {s.task_id for s in plan.rejected} == {"a1", "a2"}
    # a1's executor was given back: b's group brings its own, and nothing of a1's is counted.
    assert plan.used == Resources(cpus=1.1, mem=288)


def test_a_rolled_back_member_frees_its_executor(w):
    # a brought executor ex-9 to the agent, then its group was refused: the next task of
    # ex-9 brings it again (its resources are counted), as if a had never been.
    tasks = [exec_task("a", eid="ex-9"), exec_task("b", eid="ex-9", res="cpus:9"), exec_task("c", eid="ex-9")]
    plan = check_groups(w, ["O1"], tasks, [(0, 2)])
    assert [x.task.task_id for x in plan.accepted] == ["c"]
    assert plan.accepted[0].executor_resources == Resources(cpus=0.1, mem=32)
    assert plan.used == Resources(cpus=0.6, mem=160)


def test_without_groups_each_task_stands_alone(w):
    tasks = [exec_task("g1", res="cpus:1"), exec_task("g2", res="cpus:1")]
    plan = w.check(["O1"], tasks)
    assert [x.task.task_id for x in plan.accepted] == ["g1"]
    assert [s.task_id for s in plan.rejected] == ["g2"]


def test_groups_are_slices_not_ids_so_a_repeated_id_cannot_join_or_split_a_group(w):
    # LAUNCH_GROUP [a, b] then LAUNCH_GROUP [a, c]: the second a is a duplicate, so the
    # second group is refused whole (c does not launch alone); the first launches.
    tasks = [exec_task("a"), exec_task("b"), exec_task("a"), exec_task("c")]
    plan = check_groups(w, ["O1"], tasks, [(0, 2), (2, 4)])
    assert [x.task.task_id for x in plan.accepted] == ["a", "b"]
    assert [(s.task_id, s.reason) for s in plan.rejected] == [
        ("a", L.DUPLICATE_TASK_ID),
        ("c", L.TASK_GROUP_INVALID),
    ]
    # LAUNCH [x] then LAUNCH_GROUP [x, y]: the plain x launches, the group is refused.
    plan = check_groups(w, ["O1"], [task("x"), exec_task("x"), exec_task("y")], [(1, 3)])
    assert [x.task.task_id for x in plan.accepted] == ["x"]
    assert [(s.task_id, s.reason) for s in plan.rejected] == [
        ("x", L.DUPLICATE_TASK_ID),
        ("y", L.TASK_GROUP_INVALID),
    ]
    # LAUNCH_GROUP [x, y] then LAUNCH [x]: the group launches, the later x is the duplicate.
    plan = check_groups(w, ["O1"], [exec_task("x"), exec_task("y"), task("x")], [(0, 2)])
    assert [x.task.task_id for x in plan.accepted] == ["x", "y"]
    assert [(s.task_id, s.reason) for s in plan.rejected] == [("x", L.DUPLICATE_TASK_ID)]


@pytest.mark.parametrize("groups", [[(0, 9)], [(0, 2), (1, 3)], [(2, 1)], [(5, 7)]])
def test_slices_out_of_shape_launch_no_task_twice(w, groups):
    tasks = [task("a", "cpus:0.1"), task("b", "cpus:0.1"), task("c", "cpus:0.1")]
    plan = check_groups(w, ["O1"], tasks, groups)
    ids = [x.task.task_id for x in plan.accepted] + [s.task_id for s in plan.rejected]
    assert sorted(ids) == ["a", "b", "c"]
