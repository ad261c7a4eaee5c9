"""A stand-in for an rpc connection, for benchmarks that run the real master in
process: everything the master sends is encoded into Thrift frames, as it would be
for a socket, and the bytes are thrown away."""

from __future__ import annotations

from mezzo.rpc import Remote


class NullConnection:
    """Counts the messages and bytes the master sends on it; sends nothing."""

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.tag = None
        self.sent_bytes = 0
        self.sent_messages = 0
        self._remotes: dict[int, Remote] = {}

    def remote(self, schema):
        stub = self._remotes.get(id(schema))
        if stub is None:
            stub = self._remotes[id(schema)] = Remote(self.send, schema)
        return stub

    def send(self, frame: bytes) -> None:
        self.sent_bytes += len(frame)
        self.sent_messages += 1

    def close(self) -> None:
        pass
