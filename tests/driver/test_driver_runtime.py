"""The shared driver thread."""

from __future__ import annotations

import threading

from mezzo.driver.runtime import THREAD_NAME, get_runtime


def test_one_runtime_one_daemon_thread():
    runtime = get_runtime()
    assert get_runtime() is runtime
    loop = runtime.loop
    assert runtime.loop is loop
    assert runtime.thread.name == THREAD_NAME and runtime.thread.daemon
    assert not runtime.on_driver_thread()


def test_call_runs_inline_on_the_driver_thread_and_queued_elsewhere():
    runtime = get_runtime()
    order = []
    done = threading.Event()

    def outer():
        assert runtime.on_driver_thread()
        runtime.call(order.append, "inner")  # inline: before outer's next line
        order.append("outer")
        done.set()

    runtime.call(outer)
    assert done.wait(5)
    assert order == ["inner", "outer"]


def test_run_coroutine_returns_a_waitable_future():
    async def answer():
        return threading.current_thread().name

    assert get_runtime().run_coroutine(answer()).result(5) == THREAD_NAME
