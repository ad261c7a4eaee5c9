"""StateSnapshots driven directly on an event loop: the state is rendered in a forked
child, requests arriving meanwhile share that one snapshot, a failing child falls back
to rendering inline, close() kills the child, and nothing leaks (fds, zombies)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import structlog.testing
from mezzo.master import state_snapshot
from mezzo.master.state_snapshot import StateSnapshots
from mezzo.rpc.codec import Utf8Text
from mezzo.services import TOOL


def run(coro, timeout: float = 10.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


class TurnCounter:
    """Counts the turns of the running loop (a callback that re-schedules itself)."""

    def __init__(self) -> None:
        self.turn = 0
        self._ticking = True
        self._loop = asyncio.get_running_loop()
        self._tick()

    def _tick(self) -> None:
        self.turn += 1
        if self._ticking:
            self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._ticking = False


class Replies:
    """A reply callback recording every text it gets; ``await wait(n)`` for n of them."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._changed = asyncio.Event()

    def __call__(self, text: str) -> None:
        self.texts.append(text)
        self._changed.set()

    async def wait(self, n: int = 1, timeout: float = 5.0) -> list[str]:
        async def until() -> None:
            while len(self.texts) < n:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(until(), timeout)
        return self.texts


def pid_render(child_sleep: float = 0.0):
    """A render returning the pid it ran in; sleeps ``child_sleep`` seconds when in a child."""
    parent = os.getpid()

    def render() -> str:
        if os.getpid() != parent:
            time.sleep(child_sleep)
        return str(os.getpid())

    return render


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def assert_reaped(pid: int) -> None:
    """``pid`` is no child of ours any more: neither running nor a zombie."""
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


# ----------------------------------------------------------- rendering in a child


def test_the_reply_is_what_render_returned_in_a_child():
    parent = os.getpid()
    # Several MiB of non-ASCII text: many pipe reads, UTF-8 sequences split between them.
    body = "état ☃ 状態 " * 300_000

    def render() -> str:
        return f"{os.getpid()}|{body}"

    async def main():
        snaps = StateSnapshots(render)
        replies = Replies()
        snaps.request(replies)
        assert replies.texts == [], "answered synchronously: nothing was forked"
        assert snaps.forks == 1
        return snaps, await replies.wait()

    snaps, texts = run(main())
    assert len(texts) == 1
    pid, _, rest = texts[0].partition("|")
    assert rest == body
    assert int(pid) != parent, "render ran in the parent"
    assert snaps.forks == 1
    assert_reaped(int(pid))


def test_the_loop_keeps_running_while_the_child_renders():
    async def main():
        snaps = StateSnapshots(pid_render(child_sleep=0.5))
        replies = Replies()
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        t = asyncio.create_task(ticker())
        started = time.monotonic()
        snaps.request(replies)
        await replies.wait()
        took = time.monotonic() - started
        t.cancel()
        return took, ticks

    took, ticks = run(main())
    assert took >= 0.45
    assert ticks >= 10, f"the loop turned only {ticks} times in {took:.2f} s"


def test_requests_during_a_render_share_its_snapshot_and_later_ones_fork_again():
    parent = os.getpid()

    async def main():
        snaps = StateSnapshots(pid_render(child_sleep=0.5))
        waiting = [Replies() for _ in range(3)]
        snaps.request(waiting[0])
        await asyncio.sleep(0.1)
        snaps.request(waiting[1])  # the child is still rendering: no second fork
        await asyncio.sleep(0.1)
        snaps.request(waiting[2])
        assert snaps.forks == 1
        first = [(await r.wait())[0] for r in waiting]
        assert snaps.forks == 1
        later = Replies()
        snaps.request(later)  # the first snapshot is done: a new one
        assert snaps.forks == 2
        second = (await later.wait())[0]
        await asyncio.sleep(0.1)
        return snaps, waiting, first, second

    snaps, waiting, first, second = run(main())
    assert len(set(first)) == 1, f"waiters got different snapshots: {first}"
    assert all(len(r.texts) == 1 for r in waiting), "a waiter was answered twice"
    assert int(first[0]) != parent and int(second) != parent
    assert second != first[0], "the later request got the old snapshot"
    assert snaps.forks == 2


def test_without_fork_the_state_is_rendered_inline_and_synchronously():
    parent = os.getpid()
    calls = []

    def render() -> str:
        calls.append(os.getpid())
        return f"inline {len(calls)}"

    snaps = StateSnapshots(render, use_fork=False)
    got: list[str] = []
    snaps.request(got.append)  # no event loop needed either
    assert got == ["inline 1"]
    snaps.request(got.append)
    assert got == ["inline 1", "inline 2"]
    assert calls == [parent, parent]
    assert snaps.forks == 0

    async def on_a_loop():
        snaps.request(got.append)
        assert got[-1] == "inline 3"  # before request() returned

    run(on_a_loop())
    assert snaps.forks == 0


# ----------------------------------------------------------- bytes end to end


class Encoded(Replies):
    """An encoded-reply callback: records the :class:`Utf8Text` of every answer it gets."""


def test_an_encoded_request_gets_the_childs_utf8_ready_to_be_framed_in_place():
    parent = os.getpid()
    body = "état ☃ 状態 " * 200_000  # several MiB: many reads

    def render() -> str:
        return f"{os.getpid()}|{body}"

    async def main():
        snaps = StateSnapshots(render)
        encoded, text = Encoded(), Replies()
        snaps.request_encoded(encoded)
        snaps.request(text)  # one snapshot for both kinds of requester
        [got] = await encoded.wait()
        [as_text] = await text.wait()
        return snaps, got, as_text

    snaps, got, as_text = run(main())
    assert snaps.forks == 1
    rendered = got.decode()
    assert rendered == as_text
    pid, _, rest = rendered.partition("|")
    assert rest == body and int(pid) != parent
    framed = TOOL.encode_with_text("state", (3,), got)
    assert isinstance(framed, memoryview), "the answer was copied to be framed"
    assert framed == TOOL.encode("state", (3, rendered), {})


def test_without_fork_an_encoded_request_is_answered_at_once():
    snaps = StateSnapshots(lambda: "inline ☃", use_fork=False)
    got: list[Utf8Text] = []
    snaps.request_encoded(got.append)
    assert [t.decode() for t in got] == ["inline ☃"]


def test_the_answer_is_copied_out_a_bounded_amount_per_turn(monkeypatch):
    """The loop turns between two reads of the pipe, each of at most READ_MAX bytes:
    no turn copies the whole answer."""
    monkeypatch.setattr(state_snapshot, "READ_MAX", 64 * 1024)
    body = "x" * (3 << 20)
    reads: list[tuple[int, int]] = []  # (bytes asked for, turn)
    real_readv = os.readv

    def counting_readv(fd, buffers):
        reads.append((sum(len(b) for b in buffers), counter.turn if counter is not None else 0))
        return real_readv(fd, buffers)

    monkeypatch.setattr(os, "readv", counting_readv)
    counter: TurnCounter | None = None

    async def main():
        nonlocal counter
        counter = TurnCounter()
        snaps = StateSnapshots(lambda: body)
        replies = Replies()
        snaps.request(replies)
        [text] = await replies.wait()
        counter.stop()
        return text

    assert run(main()) == body
    assert len(reads) >= (3 << 20) // (64 * 1024)
    assert all(asked <= 64 * 1024 for asked, _ in reads)
    turns = [t for _, t in reads]
    assert len(set(turns)) == len(turns), "two reads of the pipe in one turn of the loop"


def test_waiters_of_one_snapshot_are_answered_one_per_turn():
    async def main():
        snaps = StateSnapshots(pid_render(child_sleep=0.2))
        turns: list[int] = []
        counter = TurnCounter()
        done = Replies()
        for _ in range(3):
            snaps.request(lambda text: turns.append(counter.turn))
        snaps.request(done)
        await done.wait()
        counter.stop()
        return turns

    turns = run(main())
    assert len(turns) == 3 and len(set(turns)) == 3, turns


def test_close_drops_the_waiters_not_answered_yet():
    async def main():
        snaps = StateSnapshots(pid_render(child_sleep=0.1))
        first, rest = Replies(), Replies()
        snaps.request(lambda text: (first(text), snaps.close()))
        snaps.request(rest)
        await first.wait()
        await asyncio.sleep(0.1)
        return rest.texts

    assert run(main()) == []


def test_a_later_snapshot_does_not_cut_short_the_answers_still_owed_for_an_earlier_one():
    # Slow requesters (2 ms each) keep the first snapshot's answers going for 100 turns;
    # the first of them asks again, so a second snapshot is taken and finishes meanwhile.
    async def main():
        snaps = StateSnapshots(pid_render())
        slow, again = Replies(), Replies()

        def first(text: str) -> None:
            slow(text)
            snaps.request(again)

        def later(text: str) -> None:
            time.sleep(0.002)
            slow(text)

        snaps.request(first)
        for _ in range(99):
            snaps.request(later)
        await slow.wait(100, timeout=10)
        await again.wait(timeout=10)
        return slow.texts, again.texts

    answered, second = run(main())
    assert len(answered) == 100 and len(set(answered)) == 1  # all from the first snapshot
    assert second != answered[:1]  # the second request got a snapshot of its own


# ----------------------------------------------------------- failures


def test_when_fork_fails_the_state_is_rendered_inline(monkeypatch):
    parent = os.getpid()

    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    async def main():
        snaps = StateSnapshots(pid_render())
        before = open_fds()
        monkeypatch.setattr(os, "fork", no_fork)
        got: list[str] = []
        with structlog.testing.capture_logs() as logs:
            snaps.request(got.append)
        assert got == [str(parent)], "not answered inline at once"
        assert open_fds() == before, "the pipe made for the child was left open"
        monkeypatch.undo()
        snaps.request(got.append)  # fork works again: a child renders
        await asyncio.sleep(0)
        deadline = time.monotonic() + 5
        while len(got) < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        return snaps, got, logs

    snaps, got, logs = run(main())
    assert got[1] != str(parent)
    assert snaps.forks == 1
    assert any("cannot fork" in e["event"] for e in logs), logs


def test_without_os_fork_the_state_is_rendered_inline(monkeypatch):
    monkeypatch.delattr(os, "fork")
    snaps = StateSnapshots(lambda: "inline")
    got: list[str] = []
    snaps.request(got.append)
    assert got == ["inline"] and snaps.forks == 0


def child_fails_by(how: str):
    parent = os.getpid()

    def render() -> str:
        if os.getpid() != parent:
            if how == "raising":
                raise RuntimeError("cannot render in the child")
            if how == "exiting":
                os._exit(3)
            if how == "being killed":
                os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(5)
        return f"inline in {os.getpid()}"

    return render


@pytest.mark.parametrize("how", ["raising", "exiting", "being killed"])
def test_a_failing_child_falls_back_to_rendering_inline(how):
    parent = os.getpid()

    async def main():
        snaps = StateSnapshots(child_fails_by(how))
        a, b = Replies(), Replies()
        with structlog.testing.capture_logs() as logs:
            snaps.request(a)
            snaps.request(b)
            await a.wait()
            await b.wait()
        return snaps, a.texts, b.texts, logs

    snaps, a, b, logs = run(main())
    assert a == b == [f"inline in {parent}"]
    assert snaps.forks == 1
    assert any("rendering inline" in e["event"] for e in logs), logs


@pytest.mark.parametrize("how", ["cut short", "too long"])
def test_a_child_writing_other_than_it_announced_falls_back_to_rendering_inline(monkeypatch, how):
    """The child says how long its answer is: one cut short (or longer) is not sent."""
    parent = os.getpid()
    real_write_all = state_snapshot._write_all

    def wrong_write_all(fd: int, data: bytes) -> None:
        if len(data) == 8:  # the length
            real_write_all(fd, data)
        elif how == "cut short":
            real_write_all(fd, data[: len(data) // 2])
        else:
            real_write_all(fd, data + b"!")

    monkeypatch.setattr(state_snapshot, "_write_all", wrong_write_all)

    async def main():
        snaps = StateSnapshots(lambda: f"rendered in {os.getpid()} " + "y" * 100_000)
        replies = Replies()
        with structlog.testing.capture_logs() as logs:
            snaps.request(replies)
            [text] = await replies.wait()
        return snaps, text, logs

    snaps, text, logs = run(main())
    assert text.startswith(f"rendered in {parent} ")
    assert snaps.forks == 1
    assert any("other than the answer it announced" in e["event"] for e in logs), logs


def test_close_kills_a_rendering_child_and_answers_nobody(tmp_path):
    marker = tmp_path / "child.pid"
    parent = os.getpid()
    slow = True  # read by each child as it was when it was forked

    def render() -> str:
        if os.getpid() != parent and slow:
            marker.write_text(str(os.getpid()))
            time.sleep(5)
        return f"rendered by {os.getpid()}"

    async def child_started(deadline: float) -> int:
        while not (marker.exists() and marker.read_text()):
            assert time.monotonic() < deadline, "the child never started rendering"
            await asyncio.sleep(0.01)
        return int(marker.read_text())

    async def main():
        nonlocal slow
        before = open_fds()
        snaps = StateSnapshots(render)
        dropped = Replies()
        snaps.request(dropped)
        snaps.request(dropped)
        child = await child_started(time.monotonic() + 5)
        started = time.monotonic()
        snaps.close()
        took = time.monotonic() - started
        assert_reaped(child)
        await asyncio.sleep(0.3)  # a late answer would come now
        assert dropped.texts == []
        assert open_fds() == before, "close() left the pipe open"
        # Closed is not broken: the next request forks a fresh child and only its own
        # requester is answered (the dropped ones were forgotten, not kept for later).
        slow = False
        fresh = Replies()
        snaps.request(fresh)
        assert snaps.forks == 2
        [text] = await fresh.wait()
        assert text.startswith("rendered by ") and text != f"rendered by {parent}"
        await asyncio.sleep(0.1)
        assert dropped.texts == [], "a request dropped by close() was answered later"
        # Once more while rendering, then twice more with nothing to close.
        slow = True
        marker.write_text("")
        snaps.request(dropped)
        second = await child_started(time.monotonic() + 5)
        assert second != child
        snaps.close()
        snaps.close()
        assert_reaped(second)
        await asyncio.sleep(0.1)
        assert open_fds() == before
        return snaps, took, dropped.texts

    snaps, took, texts = run(main())
    # The child would render for 5 s: close() returning well before shows it killed it.
    assert took < 3.0, f"close() took {took:.2f} s"
    assert texts == []
    assert snaps.forks == 3
    # No zombie of ours: waitpid(-1) finds no exited child (or no child at all).
    try:
        assert os.waitpid(-1, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        pass


def test_close_without_a_child_does_nothing():
    snaps = StateSnapshots(pid_render())
    snaps.close()
    assert snaps.forks == 0


def test_a_failing_reply_does_not_stop_the_others():
    def broken(text: str) -> None:
        raise ConnectionResetError("the requester went away")

    async def main():
        snaps = StateSnapshots(pid_render(child_sleep=0.2))
        first, last = Replies(), Replies()
        with structlog.testing.capture_logs() as logs:
            snaps.request(first)
            snaps.request(broken)
            snaps.request(last)
            await first.wait()
            await last.wait()
        return first.texts, last.texts, logs

    first, last, logs = run(main())
    assert first == last and len(first) == 1
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["sending the state failed"]


def test_a_failing_reply_does_not_stop_the_others_inline():
    snaps = StateSnapshots(lambda: "s", use_fork=False)
    got: list[str] = []

    def broken(text: str) -> None:
        raise ValueError("no")

    with structlog.testing.capture_logs():
        snaps.request(broken)  # must not raise into the master's dispatch
    snaps.request(got.append)
    assert got == ["s"]


# ----------------------------------------------------------- leaks


def test_no_file_descriptors_or_zombies_are_left_behind():
    async def main():
        snaps = StateSnapshots(pid_render())
        before = open_fds()
        pids = []
        for _ in range(5):
            replies = Replies()
            snaps.request(replies)
            snaps.request(replies)
            pids.append(int((await replies.wait(2))[0]))
        failing = StateSnapshots(child_fails_by("raising"))
        replies = Replies()
        with structlog.testing.capture_logs():
            failing.request(replies)
            await replies.wait()
        after = open_fds()
        return snaps, before, after, pids

    snaps, before, after, pids = run(main())
    assert after == before, f"{after - before} file descriptors leaked"
    assert snaps.forks == 5
    assert len(set(pids)) == 5
    for pid in pids:
        assert_reaped(pid)


# ----------------------------------------------------------- overload


def test_a_saturated_loop_puts_the_snapshot_off_until_it_catches_up(monkeypatch):
    from mezzo.master import state_snapshot

    monkeypatch.setattr(state_snapshot, "DEFER_STEP", 0.02)
    busy = [True]
    renders = []

    def render() -> str:
        renders.append(1)
        return "state"

    async def scenario():
        snaps = StateSnapshots(render, use_fork=False, saturated=lambda: busy[0])
        replies = Replies()
        snaps.request(replies)
        snaps.request(replies)  # shares the snapshot put off
        await asyncio.sleep(0.2)
        assert replies.texts == [] and renders == []  # waits while the loop is saturated
        busy[0] = False
        assert await replies.wait(2) == ["state", "state"]
        assert renders == [1]  # one snapshot for both
        assert snaps.deferred == 1

    run(scenario())


def test_a_snapshot_waits_for_a_saturated_loop_at_most_defer_max(monkeypatch):
    from mezzo.master import state_snapshot

    monkeypatch.setattr(state_snapshot, "DEFER_STEP", 0.02)
    monkeypatch.setattr(state_snapshot, "DEFER_MAX", 0.3)

    async def scenario():
        snaps = StateSnapshots(lambda: "late", use_fork=False, saturated=lambda: True)
        replies = Replies()
        start = time.monotonic()
        snaps.request(replies)
        assert await replies.wait(1) == ["late"]  # answered late, not never
        assert time.monotonic() - start >= 0.3

    run(scenario())


def test_close_drops_a_snapshot_put_off():
    async def scenario():
        snaps = StateSnapshots(lambda: "never", use_fork=False, saturated=lambda: True)
        replies = Replies()
        snaps.request(replies)
        snaps.close()
        await asyncio.sleep(0.4)
        assert replies.texts == []

    run(scenario())
