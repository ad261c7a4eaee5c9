"""The batch queue's bookkeeping (mezzo.queue.jobs) and its journal, without a cluster."""

from __future__ import annotations

import errno
import json
import os

import pytest

from mezzo.queue.jobs import JobState, JobTable, Limits, QueueFull, Submission, SubmissionError, parse_array
from mezzo.queue.journal import Journal, JournalError


def launch_all(table: JobTable, cpus: float = 100, mem: float = 100_000) -> list[str]:
    task_ids = []
    for job in table.fitting(cpus, mem):
        task_id = table.task_id_for(job)
        table.launched(job, task_id, "agent-1", "host-1")
        task_ids.append(task_id)
    return task_ids


def test_an_array_is_one_submission_of_numbered_jobs_with_the_index_filled_in():
    table = JobTable()
    jobs = table.submit(Submission("echo {index} > out.{index}", array=(3, 5)), "alice")
    assert [j.id for j in jobs] == ["1_3", "1_4", "1_5"]
    assert jobs[1].command == "echo 4 > out.4"
    assert {j.user for j in jobs} == {"alice"}
    assert [j.id for j in table.submit(Submission("true"), "bob")] == ["2"]
    assert list(table.queued) == ["1_3", "1_4", "1_5", "2"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("x", "expected FIRST-LAST"),
        ("5-3", "ends before it starts"),
        ("1-200001", "at most 100000"),
        ("", "expected"),
    ],
)
def test_parse_array_names_the_flag_and_the_problem(text, problem):
    with pytest.raises(SubmissionError) as caught:
        parse_array(text, "--array")
    assert caught.value.field == "--array" and problem in caught.value.problem


def test_submissions_out_of_bounds_are_refused_whole():
    table = JobTable(Limits(max_waiting=10, max_command_bytes=16))
    with pytest.raises(SubmissionError, match="command: empty"):
        table.submit(Submission("  "), "u")
    with pytest.raises(SubmissionError, match="longer than 16 bytes"):
        table.submit(Submission("x" * 17), "u")
    with pytest.raises(SubmissionError, match="retries"):
        table.submit(Submission("true", retries=-1), "u")
    table.submit(Submission("true", array=(1, 8)), "u")
    with pytest.raises(SubmissionError, match="queue is full: 8 jobs waiting, at most 10"):
        table.submit(Submission("true", array=(1, 3)), "u")
    assert table.waiting == 8  # nothing of the refused one was added


def test_offers_are_filled_oldest_first_and_backfilled_past_a_job_too_big():
    table = JobTable()
    table.submit(Submission("big", cpus=4), "u")
    table.submit(Submission("small", cpus=1, array=(1, 3)), "u")
    chosen = table.fitting(cpus=2.5, mem=1000)
    assert [j.id for j in chosen] == ["2_1", "2_2"]
    assert table.fitting(cpus=0.5, mem=1000) == []
    # Memory counts too, in exact thousandths (0.1 + 0.2 fits in 0.3).
    table2 = JobTable()
    table2.submit(Submission("a", cpus=0.1, mem=10), "u")
    table2.submit(Submission("b", cpus=0.2, mem=10), "u")
    assert len(table2.fitting(cpus=0.3, mem=20)) == 2
    assert len(table2.fitting(cpus=0.3, mem=19)) == 1


def test_an_array_too_big_for_the_offer_costs_one_look_and_hides_nothing_behind_it():
    table = JobTable(Limits(scan_per_offer=5))
    table.submit(Submission("huge", cpus=64, array=(1, 40_000)), "u")
    table.submit(Submission("tiny", cpus=0.1), "u")
    assert [j.id for j in table.fitting(cpus=1, mem=1000)] == ["2"]


def test_a_scan_stops_after_the_per_offer_limit_of_submissions():
    table = JobTable(Limits(scan_per_offer=5))
    for _ in range(5):
        table.submit(Submission("huge", cpus=64), "u")
    table.submit(Submission("tiny", cpus=0.1), "u")
    assert table.fitting(cpus=1, mem=1000) == []  # the tiny one is past the first 5


def test_a_requeued_job_keeps_its_submissions_place():
    table = JobTable()
    (first,) = table.submit(Submission("a", cpus=1), "u")
    table.submit(Submission("b", cpus=1, array=(1, 2)), "u")
    (task_id,) = [table.task_id_for(first)]
    table.launched(first, task_id, "ag", "h")
    table.task_ended(task_id, "TASK_DROPPED")
    assert list(table.queued) == ["1", "2_1", "2_2"]
    assert [j.id for j in table.fitting(cpus=2, mem=1000)] == ["1", "2_1"]


def test_a_failed_task_is_retried_until_its_retries_are_used_then_the_job_fails():
    table = JobTable()
    (job,) = table.submit(Submission("false", retries=2), "u")
    for attempt in (1, 2, 3):
        (task_id,) = launch_all(table)
        assert task_id == f"job-1.{attempt}"
        table.task_ended(task_id, "TASK_FAILED", message="exited 1", exit_code=1)
    assert job.state is JobState.FAILED and job.attempts == 3 and job.exit_code == 1
    assert job.last == "TASK_FAILED: exited 1"
    assert not table.queued and not table.running


def test_a_task_dropped_or_revoked_is_requeued_without_using_a_retry():
    table = JobTable()
    (job,) = table.submit(Submission("sleep 9"), "u")
    (t1,) = launch_all(table)
    table.task_ended(t1, "TASK_DROPPED", reason="master_disconnected")
    (t2,) = launch_all(table)
    table.task_ended(t2, "TASK_KILLED", reason="revoked")
    assert job.state is JobState.QUEUED and job.attempts == 0 and job.launches == 2
    (t3,) = launch_all(table)
    table.task_ended(t3, "TASK_FINISHED", exit_code=0)
    assert job.state is JobState.FINISHED and job.attempts == 1


def test_a_task_the_master_refused_fails_the_job_at_once():
    table = JobTable()
    (job,) = table.submit(Submission("true", retries=5), "u")
    (t1,) = launch_all(table)
    table.task_ended(t1, "TASK_ERROR", message="run_tasks refused")
    assert job.state is JobState.FAILED and job.attempts == 1


def test_cancel_ends_a_queued_job_now_and_a_running_one_when_its_kill_is_reported():
    table = JobTable()
    queued, running = table.submit(Submission("x", array=(1, 2), cpus=1), "u")
    launch_all(table, cpus=1)
    assert running.state is JobState.QUEUED  # only one fitted: the first
    queued, running = running, queued
    assert table.cancel(queued) is None and queued.state is JobState.CANCELLED
    task_id = table.cancel(running)
    assert task_id == running.task_id and running.state is JobState.RUNNING and running.cancelling
    table.task_ended(task_id, "TASK_KILLED")
    assert running.state is JobState.CANCELLED and not running.cancelling


def test_a_stale_or_duplicate_end_is_ignored():
    table = JobTable()
    table.submit(Submission("true"), "u")
    (t1,) = launch_all(table)
    assert table.task_ended(t1, "TASK_FINISHED") is not None
    assert table.task_ended(t1, "TASK_FAILED") is None
    assert table.task_ended("job-99.1", "TASK_FAILED") is None


def test_select_takes_jobs_and_whole_submissions():
    table = JobTable()
    table.submit(Submission("a", array=(1, 3)), "u")
    table.submit(Submission("b"), "u")
    assert sorted(j.id for j in table.select(["1"])) == ["1_1", "1_2", "1_3"]
    assert sorted(j.id for j in table.select(["1_2", "2", "7", "zz"])) == ["1_2", "2"]


def test_only_the_last_ended_jobs_are_remembered():
    table = JobTable(Limits(max_ended=3))
    table.submit(Submission("true", array=(1, 5)), "u")
    for task_id in launch_all(table):
        table.task_ended(task_id, "TASK_FINISHED")
    assert sorted(table.jobs) == ["1_3", "1_4", "1_5"]


# -- the journal ------------------------------------------------------------------------


def test_the_journal_brings_back_every_job_the_framework_id_and_the_next_number(tmp_path):
    table = JobTable()
    journal = Journal(tmp_path / "q")
    journal.load(table)
    jobs = table.submit(Submission("echo {index}", array=(1, 3), retries=1), "alice")
    journal.jobs_changed(jobs, sync=True)
    journal.framework_registered("fw-1")
    task_ids = launch_all(table, cpus=2)
    journal.jobs_changed(table.running.values(), sync=True)
    ended = table.task_ended(task_ids[0], "TASK_FINISHED", exit_code=0)
    journal.jobs_changed([ended])
    journal.close()

    again = JobTable()
    reopened = Journal(tmp_path / "q")
    reopened.load(again)
    assert reopened.framework_id == "fw-1"
    assert {j.id: j.state for j in again.all_jobs()} == {
        "1_1": JobState.FINISHED,
        "1_2": JobState.RUNNING,
        "1_3": JobState.QUEUED,
    }
    assert list(again.running) == [task_ids[1]] and list(again.queued) == ["1_3"]
    assert again.jobs["1_2"].launches == 1 and again.jobs["1_1"].exit_code == 0
    assert [j.id for j in again.submit(Submission("next"), "bob")] == ["2"]


def test_a_last_line_cut_by_a_crash_is_dropped_and_the_file_mended(tmp_path):
    table = JobTable()
    journal = Journal(tmp_path)
    journal.load(table)
    journal.jobs_changed(table.submit(Submission("true"), "u"), sync=True)
    journal.close()
    with open(journal.path, "a") as f:
        f.write('{"job": {"id": "2", "subm')
    again = JobTable()
    reopened = Journal(tmp_path)
    reopened.load(again)
    assert list(again.jobs) == ["1"]
    reopened.jobs_changed(again.submit(Submission("more"), "u"))
    reopened.close()
    lines = journal.path.read_text().splitlines()
    assert all(json.loads(line) for line in lines) and len(lines) == 2


def test_a_damaged_line_stops_the_start_naming_the_file_and_line(tmp_path):
    (tmp_path / "jobs.journal").write_text('{"framework_id": "f"}\nnot json\n{"next_submission": 3}\n')
    with pytest.raises(JournalError, match=r"jobs.journal, line 2: not a record"):
        Journal(tmp_path).load(JobTable())


def test_compaction_keeps_what_the_table_holds_in_far_fewer_lines(tmp_path, monkeypatch):
    monkeypatch.setattr("mezzo.queue.journal.COMPACT_SLACK", 10)
    table = JobTable()
    journal = Journal(tmp_path)
    journal.load(table)
    journal.framework_registered("fw")
    (job,) = table.submit(Submission("false", retries=30), "u")
    for _ in range(30):
        (task_id,) = launch_all(table)
        journal.jobs_changed([job])
        table.task_ended(task_id, "TASK_FAILED")
        journal.jobs_changed([job])
    journal.maybe_compact(table)
    journal.close()
    assert len(journal.path.read_text().splitlines()) == 3  # next number, framework id, the job
    again = JobTable()
    Journal(tmp_path).load(again)
    assert again.jobs["1"].attempts == 30 and again.next_submission == 2


def test_a_job_named_many_times_is_selected_once_and_its_kill_asked_once():
    table = JobTable()
    table.submit(Submission("sleep 9", array=(1, 2)), "u")
    launch_all(table)
    picked = list(table.select(["1_1", "1", "1_1", "1"]))
    assert sorted(j.id for j in picked) == ["1_1", "1_2"]
    job = table.jobs["1_1"]
    assert table.cancel(job) == job.task_id
    assert table.cancel(job) is None  # asked already
    assert table.cancelling() == [job]


def test_a_removed_framework_requeues_its_running_jobs_and_ends_cancelled_ones():
    table = JobTable()
    a, b = table.submit(Submission("x", array=(1, 2)), "u")
    launch_all(table)
    table.cancel(b)
    table.requeue_running()
    assert a.state is JobState.QUEUED and a.attempts == 0 and list(table.queued) == ["1_1"]
    assert b.state is JobState.CANCELLED and not table.running


def test_a_drained_agent_does_not_use_a_retry():
    table = JobTable()
    (job,) = table.submit(Submission("x"), "u")
    (task_id,) = launch_all(table)
    table.task_ended(task_id, "TASK_KILLED", reason="agent_drained")
    assert job.state is JobState.QUEUED and job.attempts == 0


def test_amounts_and_the_bytes_of_a_submission_are_bounded():
    table = JobTable(Limits(max_submission_bytes=1000))
    with pytest.raises(SubmissionError, match="cpus: 1e\\+306 is not between 0 and 1e\\+09"):
        table.submit(Submission("true", cpus=1e306), "u")
    with pytest.raises(SubmissionError, match="more than 1000 bytes"):
        table.submit(Submission("x" * 100, array=(1, 11)), "u")
    assert table.submit(Submission("x" * 100, array=(1, 10)), "u")


def test_a_launch_that_could_not_be_recorded_is_undone():
    table = JobTable()
    table.submit(Submission("x", array=(1, 3)), "u")
    jobs = table.fitting(cpus=2, mem=1000)
    for job in jobs:
        table.launched(job, table.task_id_for(job), "a", "h")
    table.not_launched(jobs)
    assert list(table.queued) == ["1_1", "1_2", "1_3"] and not table.running
    assert table.task_id_for(table.jobs["1_1"]) == "job-1_1.1"


def test_a_failed_journal_write_leaves_no_half_line_and_queues_nothing(tmp_path, monkeypatch):
    from mezzo.queue.framework import QueueFramework

    table = JobTable()
    journal = Journal(tmp_path)
    journal.load(table)
    queue = QueueFramework(table, journal)
    queue.submit(Submission("first"), "u")
    size = journal.path.stat().st_size
    real_write = os.write

    def full_disk(fd, data):
        real_write(fd, data[: len(data) // 2])  # half of it lands, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("mezzo.queue.journal.os.write", full_disk)
    with pytest.raises(JournalError, match="No space left on device"):
        queue.submit(Submission("second", array=(1, 50)), "u")
    monkeypatch.undo()
    assert journal.path.stat().st_size == size and list(table.jobs) == ["1"]
    assert [j.id for j in queue.submit(Submission("third"), "u")] == ["2"]
    journal.close()
    again = JobTable()
    Journal(tmp_path).load(again)
    assert list(again.jobs) == ["1", "2"]


def test_one_user_cannot_fill_the_queue():
    table = JobTable(Limits(max_waiting=100, max_waiting_per_user=10))
    table.submit(Submission("x", array=(1, 8)), "alice")
    with pytest.raises(QueueFull, match="alice has 8 jobs waiting; at most 10 a user"):
        table.submit(Submission("x", array=(1, 3)), "alice")
    assert table.submit(Submission("x", array=(1, 10)), "bob")
    (job,) = table.submit(Submission("y"), "alice")
    table.cancel(job)
    assert table.waiting_by_user["alice"] == 8  # ended jobs do not count
