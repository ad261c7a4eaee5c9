"""``network/bandwidth`` with a command run as another user (``agent.switch_user``).

Entering a network namespace (``setns``) takes CAP_SYS_ADMIN, so the isolator's
``preexec`` must run before the containerizer drops to the task's user: a command run as
``nobody`` is in its container's namespace, routed through its veth, and keeps no
capability. Both ways the containerizer switches are checked: the forked child dropping
after the preexec functions (no exit wrapper), and ``setpriv`` under the exit wrapper.
"""

from __future__ import annotations

import os

import pytest

from mezzo.agent.containerizer import Containerizer
from mezzo.agent.users import resolve
from mezzo_isolator_netbw import NetBandwidthIsolator, netns

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="needs root: network namespaces, veth links and tc qdiscs need CAP_SYS_ADMIN and CAP_NET_ADMIN",
)

PROBE = (
    "id -u; readlink /proc/self/ns/net; grep CapEff /proc/self/status; "
    # The default route (destination 00000000) and the device it leaves by.
    "awk '$2 == \"00000000\" {print $1}' /proc/net/route"
)


@pytest.mark.parametrize("exit_wrapper", [False, True], ids=["dropped-in-child", "setpriv-under-wrapper"])
def test_a_command_run_as_nobody_is_in_its_network_namespace(run, launcher, tmp_path, exit_wrapper):
    iso = NetBandwidthIsolator({}, key="agent.isolators.network/bandwidth")
    containerizer = Containerizer([iso])
    nobody = resolve("nobody")

    async def main():
        c = launcher.container(["/bin/sh", "-c", PROBE], net_mbps=10)
        c.launch.user = nobody
        exit_file = str(tmp_path / f"{c.container_id}.mezzo-exit") if exit_wrapper else None
        running = await containerizer.launch(
            c, stdout=f"{c.sandbox}/stdout", stderr=f"{c.sandbox}/stderr", exit_file=exit_file
        )
        try:
            assert await running.wait() == 0
            expected = os.stat(netns.path(c.state[iso.name]["netns"])).st_ino
        finally:
            with open(f"{c.sandbox}/stdout") as f:
                said = f.read().split("\n")
            with open(f"{c.sandbox}/stderr") as f:
                errors = f.read()
            running.kill()
            assert await containerizer.destroy(c) == []
        assert said[0] == str(nobody.uid), errors
        assert said[1] == f"net:[{expected}]"  # the container's namespace, not the host's
        assert said[2].split() == ["CapEff:", "0000000000000000"]
        assert said[3] == "eth0"

    run(main())
