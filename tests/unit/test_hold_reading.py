"""``Connection.hold_reading``: a handler holds the peer's next messages until it
releases them; they are then handled in order, also behind a frame decoded off the
loop. Real loopback sockets."""

from __future__ import annotations

import asyncio

from mezzo.rpc.endpoint import connect, serve
from mezzo.services import MASTER
from mezzo.wire.ttypes import TaskStatus

from .test_endpoint import Inbox, run


class Holder(Inbox):
    """Holds reading on ``kill_task(_, "hold")`` and on a big ``reconcile_tasks``."""

    def __init__(self) -> None:
        super().__init__(MASTER.methods)
        self.releases: list = []

    def kill_task(self, conn, fid, tid, *rest):
        if tid == "hold":
            self.releases.append(conn.hold_reading())
        self.queue.put_nowait(("kill_task", conn, (fid, tid)))

    def reconcile_tasks(self, conn, fid, statuses):
        self.releases.append(conn.hold_reading())
        self.queue.put_nowait(("reconcile_tasks", conn, (fid, len(statuses))))


def test_held_messages_wait_for_the_release_and_come_in_order():
    async def scenario():
        inbox = Holder()
        server = await serve("127.0.0.1", 0, MASTER, inbox)
        port = server.sockets[0].getsockname()[1]
        client = await connect("127.0.0.1", port, MASTER, Inbox(()))
        peer = client.remote(MASTER)
        peer.kill_task("f1", "hold")
        peer.kill_task("f1", "second")
        peer.reconcile_tasks("f1", [TaskStatus(task_id=f"t{i:08d}") for i in range(20_000)])  # off the loop
        peer.kill_task("f1", "third")
        got = await inbox.next(5)
        assert got[2] == ("f1", "hold")
        await asyncio.sleep(0.2)
        assert inbox.queue.empty()  # held
        release = inbox.releases.pop()
        release()
        release()  # idempotent
        assert (await inbox.next(5))[2] == ("f1", "second")
        assert (await inbox.next(20))[2] == ("f1", 20_000)
        await asyncio.sleep(0.2)
        assert inbox.queue.empty()  # the big one's handler held reading too
        inbox.releases.pop()()
        assert (await inbox.next(5))[2] == ("f1", "third")
        client.close()
        server.close()

    run(scenario(), timeout=40)
