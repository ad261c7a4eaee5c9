"""Hostile bytes at the master's and an agent's port: both keep serving.

Random frames, truncated frames, oversized length headers, messages of the wrong
service, and every method of each service called with no (all-default) arguments.
"""

from __future__ import annotations

import random
import socket
import struct

import mezzo
from mezzo import CommandInfo, Filters, Resources, TaskInfo
from mezzo.services import AGENT, EXECUTOR, MASTER, SCHEDULER

from .conftest import Recorder, wait_for


def _send(port: int, data: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(data)
        # Done sending: the daemon handles what came, sees the end and closes, and the
        # recv below returns then, not after its timeout.
        s.shutdown(socket.SHUT_WR)
        s.settimeout(0.2)
        try:
            s.recv(65536)
        except OSError:
            pass


def _frames(schema, rng: random.Random) -> list[bytes]:
    valid = [schema.encode(m, (), {}) for m in schema.methods]
    out = list(valid)  # every method with default arguments
    for other in (SCHEDULER, EXECUTOR):  # calls of a service this daemon does not serve
        out += [other.encode(m, (), {}) for m in list(other.methods)[:3]]
    for _ in range(150):
        kind = rng.randrange(5)
        if kind == 0:  # random payload in a correct frame
            payload = rng.randbytes(rng.randrange(1, 300))
            out.append(struct.pack("!I", len(payload)) + payload)
        elif kind == 1:  # a valid message cut short
            v = rng.choice(valid)
            out.append(v[: rng.randrange(1, len(v))])
        elif kind == 2:  # a valid message with flipped bytes
            v = bytearray(rng.choice(valid))
            for _ in range(3):
                v[rng.randrange(4, len(v))] = rng.randrange(256)
            out.append(bytes(v))
        elif kind == 3:  # an absurd length header
            out.append(struct.pack("!I", rng.choice([2**31 - 1, 2**32 - 1, 64 * 1024 * 1024])) + b"x" * 10)
        else:  # pure noise
            out.append(rng.randbytes(rng.randrange(1, 64)))
    return out


def test_master_and_agent_survive_garbage(make_cluster, drivers):
    cluster = make_cluster(1, master={"allocation_interval": 0.01})
    agent_port = cluster.state()["agents"][0]["port"]
    rng = random.Random(20261122)
    for port, schema in ((cluster.port, MASTER), (agent_port, AGENT)):
        for data in _frames(schema, rng):
            _send(port, data)
    # Both processes are alive and the cluster still runs a task end to end.
    assert all(p.poll() is None for p in cluster.procs.values()), "a daemon died"
    state = cluster.state()
    assert [a["connected"] for a in state["agents"]] == [True]

    def launch(driver, offers):
        for o in offers:
            if not rec.final("after-fuzz") and "after-fuzz" not in launched:
                launched.add("after-fuzz")
                driver.launch_tasks(o.offer_id, [TaskInfo(task_id="after-fuzz", agent_id=o.agent_id,
                                    resources=Resources(cpus=0.1, mem=16),
                                    command=CommandInfo(value="true"))], Filters(refuse_seconds=0))
            else:
                driver.decline_offer(o.offer_id, Filters(refuse_seconds=60))

    launched: set[str] = set()
    rec = Recorder(launch)
    drivers(rec, "after-fuzz", cluster.master)
    wait_for(lambda: rec.final("after-fuzz") is not None, 20, "a task after the fuzzing")
    assert mezzo.state_name(rec.final("after-fuzz").state) == "TASK_FINISHED"
    # The master logged what it closed, naming the problem.
    log = (cluster.dir / "master.log").read_text()
    assert "malformed message" in log and "oversized frame" in log
