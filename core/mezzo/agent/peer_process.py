"""Whether a TCP connection to the agent comes from a given container's processes.

The v1 executor API has no secret an unmodified executor sends (Mesos' optional
``Authorization: Bearer`` token is one pymesos never sends), yet anyone who reaches the
agent's port can name a framework's and an executor's ids. The agent can still tell
who is calling when the caller is on the same host, which an executor always is: the
kernel lists every TCP socket of a network namespace with its addresses and inode
(``/proc/<pid>/net/tcp``, ``tcp6``), and which process holds an inode is in
``/proc/<pid>/fd``. :func:`connection_from_container` puts the two together: the
socket at the far end of a connection (its local address is the connection's peer, its
remote one the agent's) must be held by a process of the container.

The table read is the container leader's network namespace (a container with a
network namespace of its own, from the ``netbw`` isolator, dials the agent from there).
Addresses only name a socket within one namespace, so for such a container a connection
whose far end is also listed in the agent's own namespace is refused: it comes from
beside the agent, from the address and port some socket in the container happens to
have. A connection through address translation is not recognised (the answer is then
False: refused, never wrongly accepted). Cost: linear in the namespaces' sockets, the
host's processes and the container's open files; the caller runs it off its event loop,
once per connection.
"""

from __future__ import annotations

import ipaddress
import os
import sys

from . import posix

ESTABLISHED = "01"
"""The ``st`` column of an established connection in ``/proc/net/tcp``."""


def connection_from_container(leader: int, peer: tuple[str, int], local: tuple[str, int]) -> bool:
    """Whether the connection whose far end is ``peer`` and near end ``local`` (the
    agent's socket: ``getpeername()``, ``getsockname()``) is held at the far end by a
    process of the container led by ``leader``."""
    if _namespace(leader) != _namespace(os.getpid()):
        # Addresses name a socket only within one namespace: a stranger beside the agent
        # may dial from the very address and port a socket in the container's namespace
        # has. A connection whose far end is in the agent's own namespace is not the
        # container's, whatever the container's table holds.
        if socket_inode(os.getpid(), peer, local) is not None:
            return False
    inode = socket_inode(leader, peer, local)
    if inode is None:
        return False
    wanted = f"socket:[{inode}]"
    return any(_holds(entry.pid, wanted) for entry in posix.container_processes(leader))


def socket_inode(netns_pid: int, local: tuple[str, int], remote: tuple[str, int]) -> int | None:
    """The inode of the established TCP socket from ``local`` to ``remote`` in the network
    namespace of ``netns_pid``; None if there is none (or it cannot be read)."""
    for table, key in _keys(local, remote):
        try:
            with open(f"{posix.PROC}/{netns_pid}/net/{table}", encoding="ascii") as f:
                next(f, None)  # the header
                for line in f:
                    fields = line.split()
                    if (
                        len(fields) > 9
                        and fields[1] == key[0]
                        and fields[2] == key[1]
                        and fields[3] == ESTABLISHED
                    ):
                        return int(fields[9]) or None
        except (OSError, ValueError):
            continue
    return None


def _keys(local: tuple[str, int], remote: tuple[str, int]) -> list[tuple[str, tuple[str, str]]]:
    """Where the socket would be listed (``tcp`` or ``tcp6``) and as which pair of
    columns. An IPv4-mapped IPv6 address (an agent listening on ``::``) is looked for as
    the IPv4 address it maps, the form the dialling side's socket has, and as itself."""
    keys = []
    mapped = [_address(local[0]), _address(remote[0])]
    if all(isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped for a in mapped):
        plain = [a.ipv4_mapped for a in mapped if isinstance(a, ipaddress.IPv6Address)]
        keys.append(("tcp", (_column(plain[0], local[1]), _column(plain[1], remote[1]))))
    if all(a is not None for a in mapped) and len({a.version for a in mapped if a is not None}) == 1:
        table = "tcp" if mapped[0] is not None and mapped[0].version == 4 else "tcp6"
        keys.append((table, (_column(mapped[0], local[1]), _column(mapped[1], remote[1]))))
    return keys


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.partition("%")[0])  # no zone: the table has none
    except ValueError:
        return None


def _column(address: ipaddress.IPv4Address | ipaddress.IPv6Address | None, port: int) -> str:
    """An address as the kernel prints it: each 32-bit word of the network-order bytes
    read in the host's byte order, in hex, then ``:`` and the port in hex."""
    assert address is not None
    raw = address.packed
    words = "".join(f"{int.from_bytes(raw[i : i + 4], sys.byteorder):08X}" for i in range(0, len(raw), 4))
    return f"{words}:{port:04X}"


def _namespace(pid: int) -> str:
    """The network namespace ``pid`` is in (``net:[inode]``; "" if it cannot be read)."""
    try:
        return os.readlink(f"{posix.PROC}/{pid}/ns/net")
    except OSError:
        return ""


def _holds(pid: int, wanted: str) -> bool:
    """Whether ``pid`` has the socket ``wanted`` (``socket:[inode]``) open."""
    directory = f"{posix.PROC}/{pid}/fd"
    try:
        names = os.listdir(directory)
    except OSError:
        return False
    for name in names:
        try:
            if os.readlink(f"{directory}/{name}") == wanted:
                return True
        except OSError:
            continue
    return False
