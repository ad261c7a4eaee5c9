"""The iterative example framework (examples/iterative, paper §6.4): Spark's way and Hadoop's.

The data set and the delay-scheduling choice are checked on their own; then both ways
run for real (``python -m examples.iterative``) against a cluster of real agents: they
must give the weights the regression gives computed in this process, bit for bit; the
cached way must answer from its executors' memory after the first iteration, and carry on
when an executor is killed, loading what it held again elsewhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

np = pytest.importorskip("numpy", reason="numpy is installed by make setup (requirements-dev.txt)")

import mezzo  # noqa: E402
from examples.iterative import CachedScheduler, Partition, gradient, make_partitions, parse  # noqa: E402
from examples.iterative.data import write_partition  # noqa: E402
from examples.iterative.scheduler import STEP  # noqa: E402
from mezzo import Resources  # noqa: E402

from .conftest import wait_for  # noqa: E402


def reference_weights(partitions: list[Partition], iterations: int) -> list[float]:
    """The regression computed here, as the frameworks compute it."""
    data = [parse(p.path, p.dims) for p in partitions]
    points = sum(p.rows for p in partitions)
    w = np.zeros(partitions[0].dims)
    for _ in range(iterations):
        total = sum((gradient(x, y, w) for x, y in data), np.zeros_like(w))
        w = w - STEP * total / points
    return w.tolist()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[str, list[Partition]]:
    directory = tmp_path_factory.mktemp("lr")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.iterative",
            "prepare",
            "--data",
            str(directory),
            "--partitions",
            "4",
            "--rows",
            "5000",
            "--dims",
            "6",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    parts = [Partition(**p) for p in json.loads((directory / "partitions.json").read_text())]
    return str(directory), parts


# -- the data -------------------------------------------------------------------------------


def test_a_partition_is_made_again_from_its_seed_byte_for_byte(tmp_path):
    (part,) = make_partitions(tmp_path, 1, 300, 3, seed=7)
    first = Path(part.path).read_bytes()
    os.unlink(part.path)
    write_partition(part)
    assert Path(part.path).read_bytes() == first
    points, labels = parse(part.path, 3)
    assert points.shape == (300, 3) and set(labels) == {-1.0, 1.0}
    with pytest.raises(ValueError, match="columns"):
        parse(part.path, 4)


def test_the_gradient_is_the_logistic_losss():
    x = np.array([[1.0, 2.0], [-1.0, 0.5]])
    y = np.array([1.0, -1.0])
    w = np.array([0.1, -0.2])
    expected = sum((1 / (1 + np.exp(-yi * (w @ xi))) - 1) * yi * xi for xi, yi in zip(x, y, strict=True))
    assert np.allclose(gradient(x, y, w), expected)


# -- delay scheduling, on its own ------------------------------------------------------------


def test_tasks_wait_for_their_partitions_executor_then_run_elsewhere(tmp_path):
    parts = [Partition(i, f"{tmp_path}/p{i}", 10, 2, i) for i in range(4)]
    s = CachedScheduler(
        parts, 2, Resources(cpus=1, mem=64), executor_resources=Resources(cpus=0.1), delay=1.0
    )
    s.cached_on = {0: "a", 1: "a", 2: "b"}  # 3 is held nowhere
    now = time.monotonic()
    s.pending = dict.fromkeys(range(4), now)
    # An offer from "b": its own partition, the homeless one; not "a"'s (not waited enough).
    assert s._choose("b", 4, now + 0.5) == [2, 3]
    assert s._choose("b", 4, now + 0.9) == []
    # Past the delay, "a"'s partitions may run on "b" too.
    assert s._choose("b", 1, now + 1.0) == [0]
    assert s._choose("a", 4, now + 1.0) == [1]  # its own
    assert (s.result.local_launches, s.result.remote_launches) == (2, 2)
    assert s.pending == {}


# -- for real ----------------------------------------------------------------------------


def run(master: str, data: str, mode: str, iterations: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "examples.iterative",
            "run",
            "--master",
            master,
            "--data",
            data,
            "--mode",
            mode,
            "--iterations",
            str(iterations),
            "--timeout",
            "120",
            "--executor-mem",
            "128",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result_of(job: subprocess.Popen) -> dict:
    out, err = job.communicate(timeout=150)
    assert job.returncode == 0, (out, err)
    return json.loads(out.strip().splitlines()[-1])


def test_both_ways_give_the_same_weights_and_the_cached_way_reads_each_partition_once(make_cluster, dataset):
    data, parts = dataset
    cluster = make_cluster(2, agent_resources="cpus:2;mem:2048", master={"allocation_interval": 0.05})
    cached = result_of(run(cluster.master, data, "cached", 4))
    mapreduce = result_of(run(cluster.master, data, "mapreduce", 4))
    expected = reference_weights(parts, 4)
    assert cached["weights"] == expected and mapreduce["weights"] == expected
    assert cached["cached_answers"] == 4 * 3  # every partition from memory after the first iteration
    assert cached["local_launches"] >= 4 * 3 and cached["reloads"] == 0
    assert len(cached["iteration_seconds"]) == len(mapreduce["iteration_seconds"]) == 4
    tasks = cluster.state()["completed_tasks"]
    assert sum(t["id"].startswith("it") for t in tasks) == 2 * 4 * 4  # a task per partition and iteration
    executors = {(a["id"], e["executor_id"]) for a in cluster.state()["agents"] for e in a["executors"]}
    assert not executors, "the cached way's executors ended with its framework"


def test_task_seconds_make_every_task_last_that_long_and_change_no_answer(make_cluster, dataset):
    # --task-seconds stands for a heavier model (the macrobenchmark's Spark jobs): each
    # task waits out the rest of it after computing, so no iteration is shorter.
    data, parts = dataset
    cluster = make_cluster(2, agent_resources="cpus:2;mem:2048", master={"allocation_interval": 0.05})
    jobs = [run(cluster.master, data, mode, 2, "--task-seconds", "0.6") for mode in ("cached", "mapreduce")]
    for result in map(result_of, jobs):
        assert result["weights"] == reference_weights(parts, 2)
        assert all(s >= 0.6 for s in result["iteration_seconds"]), result["iteration_seconds"]


def test_a_killed_executors_partitions_are_loaded_again_and_the_job_carries_on(make_cluster, dataset):
    data, parts = dataset
    cluster = make_cluster(2, agent_resources="cpus:2;mem:2048", master={"allocation_interval": 0.05})
    job = run(cluster.master, data, "cached", 100)

    def executor_pids() -> list[int]:
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"examples.iterative.executor" in argv:
                    pids.append(int(entry))
        return pids

    pids = wait_for(lambda: (p := executor_pids()) and len(p) == 2 and p, 30, "an executor on each agent")
    # Killed once it answered from memory (iteration 2 done), with many iterations to go.
    wait_for(
        lambda: any(t["id"].startswith("it2-") for t in cluster.state()["completed_tasks"]),
        60,
        "iteration 2 to end",
    )
    os.kill(pids[0], signal.SIGKILL)
    result = result_of(job)
    assert result["weights"] == reference_weights(parts, 100)
    assert result["reloads"] >= 1, result  # what the killed executor held, loaded again
    assert result["cached_answers"] > 2 * 4, result


def test_fig9_at_a_toy_size_times_both_ways():
    bench = Path(__file__).resolve().parent.parent / "bench"
    done = subprocess.run(
        [sys.executable, str(bench / "fig9.py"), "--quick", "--no-write"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=bench,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "| iterations | mapreduce (s) | cached (s) | speedup |" in out
    assert "| 1 | " in out and "| 2 | " in out
    assert "cached: 2 iterations" in out and "4 answers from memory" in out, out
    assert "cached at least 10x faster at 2 iterations" in out


class RecordingDriver:
    """What a scheduler asked of its driver, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def launch_tasks(self, offer, tasks, filters=None):
        self.calls.append(("launch", offer.offer_id, [t.task_id for t in tasks]))

    def decline_offer(self, offer, filters=None):
        self.calls.append(("decline", offer.offer_id))

    def set_needs_offers(self, needs):
        self.calls.append(("needs", needs))


def offer(offer_id: str, agent: str, cpus: float = 2) -> mezzo.Offer:
    return mezzo.Offer(
        offer_id=offer_id,
        agent_id=agent,
        hostname=agent,
        resources=Resources(cpus=cpus, mem=1024),
        executor_ids=[CachedScheduler.EXECUTOR_ID],
    )


def finish(s: CachedScheduler, driver: RecordingDriver, task_id: str, part: int) -> None:
    answer = {"gradient": [0.0] * s.partitions[0].dims, "cached": True}
    s.status_update(
        driver,
        mezzo.TaskStatus(task_id=task_id, state=mezzo.TaskState.TASK_FINISHED, data=json.dumps(answer).encode()),
    )


def test_offers_that_come_during_the_last_tasks_are_kept_for_the_next_iteration(tmp_path):
    parts = [Partition(i, f"{tmp_path}/p{i}", 10, 2, i) for i in range(2)]
    s = CachedScheduler(
        parts, 3, Resources(cpus=1, mem=64), executor_resources=Resources(mem=64), delay=5.0, hold=10.0
    )
    driver = RecordingDriver()
    s.resource_offers(driver, [offer("o1", "a", cpus=1), offer("o2", "b", cpus=1)])
    assert driver.calls == [("launch", "o1", ["it0-p0-a0"]), ("launch", "o2", ["it0-p1-a0"])]
    driver.calls.clear()
    finish(s, driver, "it0-p0-a0", 0)  # a's slot is free again: offered back, and kept
    s.resource_offers(driver, [offer("o3", "a", cpus=1)])
    assert driver.calls == [] and set(s.held) == {"o3"}, "kept, neither declined nor suppressed"
    finish(s, driver, "it0-p1-a0", 1)  # the barrier: iteration 1 starts on the kept offer
    assert ("launch", "o3", ["it1-p0-a0"]) in driver.calls, driver.calls
    assert s.result.held_launches == 1 and not s.held
    assert s.pending.keys() == {1}, "b's partition waits for b (the delay is 5 s)"


def test_kept_offers_are_bounded_declined_when_stale_and_forgotten_when_rescinded(tmp_path):
    parts = [Partition(i, f"{tmp_path}/p{i}", 10, 2, i) for i in range(2)]
    s = CachedScheduler(
        parts, 2, Resources(cpus=1, mem=64), executor_resources=Resources(mem=64), delay=5.0, hold=0.2
    )
    driver = RecordingDriver()
    s.resource_offers(driver, [offer("o1", "a", cpus=2)])  # both partitions on a
    driver.calls.clear()
    s.resource_offers(driver, [offer("o0", "b", cpus=2)])
    assert not s.held, "nothing given back yet: nothing kept (no more than it had)"
    finish(s, driver, "it0-p0-a0", 0)  # one slot given back
    driver.calls.clear()
    # As many slots kept as were given back: the next offer is declined (offers still
    # wanted: more may be given back before the barrier).
    s.resource_offers(driver, [offer("o2", "b", cpus=1), offer("o3", "c", cpus=1)])
    assert set(s.held) == {"o2"}
    assert driver.calls == [("decline", "o3")]
    s.offer_rescinded(driver, "o2")
    assert not s.held
    s.resource_offers(driver, [offer("o4", "b", cpus=1)])
    assert set(s.held) == {"o4"}
    time.sleep(0.25)  # past hold: declined at the next callback
    driver.calls.clear()
    s.resource_offers(driver, [])
    assert driver.calls[0] == ("decline", "o4") and not s.held
    # The last iteration keeps nothing: there is no next one.
    finish(s, driver, "it0-p1-a0", 1)
    s.resource_offers(driver, [offer("o5", "a", cpus=2)])  # iteration 1, both on a
    assert not s.pending
    finish(s, driver, "it1-p0-a0", 0)
    driver.calls.clear()
    s.resource_offers(driver, [offer("o6", "b", cpus=1)])
    assert not s.held and ("decline", "o6") in driver.calls


def test_kept_offers_start_iterations_for_real_and_change_no_answer(make_cluster, dataset):
    data, parts = dataset
    cluster = make_cluster(2, agent_resources="cpus:2;mem:2048", master={"allocation_interval": 0.05})
    result = result_of(run(cluster.master, data, "cached", 4, "--task-seconds", "0.3", "--hold", "2"))
    assert result["weights"] == reference_weights(parts, 4)
    assert result["held_launches"] > 0
