"""The queue between ``mezzo run``'s stream reader and the run (``_thread``-based):
order, timeouts, and a waiting caller woken by the reader, with real threads."""

from __future__ import annotations

import threading
import time

from mezzo.v1.scheduler_client import Events, StreamEnded


def test_events_come_out_in_order_and_an_empty_queue_times_out() -> None:
    events = Events()
    assert events.get(0) is None
    started = time.monotonic()
    assert events.get(0.05) is None
    assert time.monotonic() - started >= 0.04
    events.put({"n": 1})
    events.put({"n": 2})
    assert events.get(0) == {"n": 1}
    assert events.get(None) == {"n": 2}
    assert events.get(0) is None


def test_a_caller_waiting_is_woken_by_each_put_of_another_thread_and_nothing_is_lost() -> None:
    events = Events()
    n = 2000

    def produce() -> None:
        for i in range(n):
            events.put({"n": i})
            if i % 100 == 0:
                time.sleep(0.001)  # let the caller drain the queue and wait again
        events.put(StreamEnded("done"))

    producer = threading.Thread(target=produce)
    producer.start()
    got = []
    while True:
        event = events.get(10)
        assert event is not None, f"no event within 10 s after {len(got)} of them"
        if isinstance(event, StreamEnded):
            break
        got.append(event["n"])
    producer.join()
    assert got == list(range(n))
