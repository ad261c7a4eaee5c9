"""Settings of the lxc isolator: bad ones are refused naming the dotted key, before
anything touches the host (so these run anywhere); and the config they produce."""

from __future__ import annotations

import pytest

from mezzo.errors import ConfigError
from mezzo_isolator_lxc import LxcIsolator
from mezzo_isolator_lxc.lxc_config import MB, config_text, limits_for

KEY = "agent.isolators.lxc"


@pytest.mark.parametrize(
    "settings, key, problem",
    [
        ({"lxc_pth": "/x"}, "lxc_pth", "unknown setting for isolator 'lxc' (known: lxc_execute, lxc_path,"),
        ({"network": "bridge"}, "network", "expected one of host, loopback, got 'bridge'"),
        ({"cfs_quota": "yes"}, "cfs_quota", "expected true or false"),
        ({"lxc_path": "relative/dir"}, "lxc_path", "expected an absolute path"),
        ({"lxc_path": "/with space"}, "lxc_path", "expected an absolute path"),
        ({"config": ["lxc.mount.entry"]}, "config[0]", "expected a line 'lxc.<key> = <value>'"),
        ({"config": "lxc.a = b"}, "config", "expected a list of strings"),
    ],
)
def test_bad_settings_name_their_key(settings, key, problem):
    with pytest.raises(ConfigError) as err:
        LxcIsolator(settings, key=KEY)
    assert err.value.key == f"{KEY}.{key}" and problem in err.value.problem


def test_limits_follow_the_resources():
    assert limits_for(1.5, 256, hard_cpu=True) == (limits_for(1.5, 256, hard_cpu=True).__class__)(
        memory_bytes=256 * MB, cpu_shares=1536, cfs_quota_us=150_000
    )
    small = limits_for(0.001, 1, hard_cpu=False)
    assert small.memory_bytes == 32 * MB and small.cpu_shares == 2 and small.cfs_quota_us is None
    assert limits_for(0, 0, hard_cpu=True).memory_bytes is None


def test_the_config_passes_the_environment_by_name_only():
    text = config_text(
        name="mezzo-x",
        directory="/run/mezzo/lxc/mezzo-x",
        cwd="/sandbox",
        env_keys=["A", "PATH"],
        limits=limits_for(1, 64, hard_cpu=False),
        net_type="none",
        swap_accounted=True,
        extra=["lxc.cap.drop = sys_module"],
    )
    lines = text.splitlines()
    assert "lxc.environment = A" in lines and "lxc.environment = PATH" in lines
    assert "lxc.cgroup.memory.memsw.limit_in_bytes = 67108864" in lines
    assert "lxc.init.cwd = /sandbox" in lines and lines[-1] == "lxc.cap.drop = sys_module"
    assert "lxc.hook.stop = /run/mezzo/lxc/mezzo-x/stop-hook" in lines
    with pytest.raises(ValueError, match="line break"):
        config_text(
            name="x",
            directory="/d",
            cwd="/s",
            env_keys=["BAD\nKEY"],
            limits=limits_for(0, 0, hard_cpu=False),
            net_type="none",
            swap_accounted=False,
            extra=[],
        )


def test_the_sandbox_is_mounted_into_the_container_wherever_it_is():
    def config(cwd):
        return config_text(
            name="x",
            directory="/d",
            cwd=cwd,
            env_keys=[],
            limits=limits_for(0, 0, hard_cpu=False),
            net_type="none",
            swap_accounted=False,
            extra=[],
        ).splitlines()

    # lxc gives the container a /dev of its own: without the bind mount a work dir
    # under /dev/shm is missing inside and lxc cannot even enter it.
    assert "lxc.mount.entry = /dev/shm/w/runs/c dev/shm/w/runs/c none bind,create=dir 0 0" in config(
        "/dev/shm/w/runs/c"
    )
    assert not any(line.startswith("lxc.mount.entry") for line in config("/"))
    with pytest.raises(ValueError, match="without blanks"):
        config("/work dir/sandbox")
