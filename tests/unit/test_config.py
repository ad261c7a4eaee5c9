"""Config loading: defaults, types, unknown keys, component tables, overrides, files."""

from __future__ import annotations

import math

import pytest
from mezzo.config import CONFIG_ENV, Config, from_dict, load
from mezzo.errors import ConfigError, MezzoError

FULL = """
[master]
listen = "0.0.0.0:6050"
allocation_interval = 0.25
offer_timeout = 0
refuse_seconds = 1
agent_reregister_timeout = 12.5
max_frame_bytes = 1048576
offer_filters = ["min-free", "rack-spread"]

[master.allocator]
name = "strict-priority"

[master.allocator.strict-priority]
levels = { prod = 10, batch = 1 }

[master.allocator.drf]
roles = { analytics = 2.0 }

[master.offer_filter.rack-spread]
max_per_rack = 3

[agent]
master = "10.0.0.1:6050"
listen = "0.0.0.0:6051"
hostname = "node1"
resources = "cpus:4;mem:4096;ports:[31000-32000]"
attributes = { rack = "r1", zone = "z" }
work_dir = "/var/lib/mezzo"
isolation = ["posix", "cgroups/cpu"]
kill_grace_period = 5
executor_register_timeout = 30
status_update_retry = 0.5
reconnect_interval = 2
max_frame_bytes = 2048

[agent.isolators."cgroups/cpu"]
shares_per_cpu = 1024

[log]
level = "debug"
format = "json"
"""


def write(tmp_path, text: str, name: str = "mezzo.toml"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def key_error(data) -> ConfigError:
    with pytest.raises(ConfigError) as ei:
        from_dict(data)
    return ei.value


# ----------------------------------------------------------- defaults and full file


def test_defaults(monkeypatch):
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    c = load()
    assert c == Config()
    assert c.master.listen == "127.0.0.1:5050"
    assert c.master.allocation_interval == 0.1
    assert c.master.offer_timeout == 30.0
    assert c.master.refuse_seconds == 5.0
    assert c.master.max_frame_bytes == 16 * 1024 * 1024
    assert c.master.allocator.name == "drf"
    assert c.master.allocator.selected_settings() == {}
    assert c.agent.isolation == ["posix"]
    assert c.log.level == "info" and c.log.format == "console"


def test_defaults_are_not_shared_between_instances():
    a, b = from_dict({}), from_dict({})
    a.agent.isolation.append("x")
    a.master.allocator.settings["drf"] = {}
    assert b.agent.isolation == ["posix"]
    assert b.master.allocator.settings == {}


def test_full_file(tmp_path):
    c = load(write(tmp_path, FULL))
    m, a = c.master, c.agent
    assert m.listen == "0.0.0.0:6050"
    assert m.allocation_interval == 0.25
    assert m.offer_timeout == 0.0 and isinstance(m.offer_timeout, float)
    assert m.refuse_seconds == 1.0 and isinstance(m.refuse_seconds, float)
    assert m.max_frame_bytes == 1048576
    assert m.offer_filters == ["min-free", "rack-spread"]
    assert m.allocator.name == "strict-priority"
    assert m.allocator.selected_settings() == {"levels": {"prod": 10, "batch": 1}}
    assert m.allocator.settings["drf"] == {"roles": {"analytics": 2.0}}
    assert m.offer_filter_settings == {"rack-spread": {"max_per_rack": 3}}
    assert a.hostname == "node1"
    assert a.attributes == {"rack": "r1", "zone": "z"}
    assert a.isolation == ["posix", "cgroups/cpu"]
    assert a.isolator_settings == {"cgroups/cpu": {"shares_per_cpu": 1024}}
    assert a.kill_grace_period == 5.0
    assert a.max_frame_bytes == 2048
    assert c.log.level == "debug" and c.log.format == "json"


def test_load_accepts_str_path(tmp_path):
    assert load(str(write(tmp_path, "[log]\nlevel = 'warning'\n"))).log.level == "warning"


# ----------------------------------------------------------- unknown keys


@pytest.mark.parametrize(
    "data,key",
    [
        ({"mastr": {}}, "mastr"),
        ({"master": {"listn": "x"}}, "master.listn"),
        ({"agent": {"resource": "cpus:1"}}, "agent.resource"),
        ({"log": {"lvl": "info"}}, "log.lvl"),
        ({"master": {"allocator": {"name": "drf", "weights": 3}}}, "master.allocator.weights"),
        ({"master": {"offer_filter_settings": {}}}, "master.offer_filter_settings"),
        ({"agent": {"isolator_settings": {}}}, "agent.isolator_settings"),
        ({"agent": {"offer_filter": {"x": {}}}}, "agent.offer_filter"),
        ({"master": {"isolators": {"x": {}}}}, "master.isolators"),
    ],
)
def test_unknown_keys_are_named(data, key):
    err = key_error(data)
    assert str(err).startswith(key + ":")
    assert err.key == key
    assert "unknown key" in err.problem


def test_unknown_key_lists_known_keys():
    err = key_error({"master": {"allocation_intervall": 1}})
    assert "allocation_interval" in err.problem and "offer_timeout" in err.problem
    assert "allocator" in err.problem and "offer_filter" in err.problem


def test_config_error_is_a_mezzo_error():
    assert issubclass(ConfigError, MezzoError)


# ----------------------------------------------------------- wrong types


@pytest.mark.parametrize(
    "data,key",
    [
        ({"master": 5}, "master"),
        ({"master": {"listen": 5050}}, "master.listen"),
        ({"master": {"allocation_interval": "fast"}}, "master.allocation_interval"),
        ({"master": {"offer_timeout": True}}, "master.offer_timeout"),
        ({"master": {"refuse_seconds": -1}}, "master.refuse_seconds"),
        ({"master": {"refuse_seconds": math.nan}}, "master.refuse_seconds"),
        ({"master": {"refuse_seconds": math.inf}}, "master.refuse_seconds"),
        ({"master": {"refuse_seconds": -math.inf}}, "master.refuse_seconds"),
        ({"master": {"max_frame_bytes": 0}}, "master.max_frame_bytes"),
        ({"master": {"max_frame_bytes": 1.5}}, "master.max_frame_bytes"),
        ({"master": {"max_frame_bytes": True}}, "master.max_frame_bytes"),
        ({"master": {"max_frame_bytes": "16M"}}, "master.max_frame_bytes"),
        ({"master": {"offer_filters": "min-free"}}, "master.offer_filters"),
        ({"master": {"offer_filters": ["a", 1]}}, "master.offer_filters"),
        ({"master": {"allocator": "drf"}}, "master.allocator"),
        ({"master": {"allocator": {"name": 1}}}, "master.allocator.name"),
        ({"master": {"offer_filter": []}}, "master.offer_filter"),
        ({"master": {"offer_filter": {"rack": 3}}}, "master.offer_filter.rack"),
        ({"agent": {"isolation": "posix"}}, "agent.isolation"),
        ({"agent": {"attributes": {"rack": 1}}}, "agent.attributes"),
        ({"agent": {"attributes": ["rack"]}}, "agent.attributes"),
        ({"agent": {"isolators": {"posix": "on"}}}, "agent.isolators.posix"),
        ({"agent": {"kill_grace_period": "3s"}}, "agent.kill_grace_period"),
        ({"log": {"level": 10}}, "log.level"),
        ({"log": []}, "log"),
    ],
)
def test_wrong_types_are_named(data, key):
    err = key_error(data)
    assert str(err).startswith(key + ":"), str(err)
    assert err.key == key


def test_root_must_be_a_table():
    assert key_error([1]).key == "<root>"


def test_ints_are_accepted_as_floats():
    c = from_dict({"master": {"offer_timeout": 7}})
    assert c.master.offer_timeout == 7.0 and type(c.master.offer_timeout) is float


def test_allocator_table_named_like_a_field_is_not_an_internal_error():
    """``[master.allocator.<name>]`` holds an allocator's own settings; whatever the
    user names it, the result is a Config or a ConfigError naming the key, never an
    internal error (AssertionError/TypeError)."""
    table = "settings"
    try:
        c = from_dict({"master": {"allocator": {table: {"x": 1}}}})
    except ConfigError as exc:
        assert str(exc).startswith(f"master.allocator.{table}")
    else:
        assert c.master.allocator.settings[table] == {"x": 1}


# ----------------------------------------------------------- component tables


def test_component_tables_pass_through_unvalidated():
    c = from_dict({
        "master": {
            "allocator": {"name": "mine", "mine": {"anything": [1, {"nested": True}]}},
            "offer_filter": {"f1": {"k": "v"}, "f2": {}},
        },
        "agent": {"isolators": {"lxc": {"template": "busybox", "n": 2}}},
    })
    assert c.master.allocator.selected_settings() == {"anything": [1, {"nested": True}]}
    assert c.master.offer_filter_settings == {"f1": {"k": "v"}, "f2": {}}
    assert c.agent.isolator_settings == {"lxc": {"template": "busybox", "n": 2}}


def test_selected_settings_of_unconfigured_allocator_is_empty():
    c = from_dict({"master": {"allocator": {"name": "drf", "other": {"x": 1}}}})
    assert c.master.allocator.selected_settings() == {}


def test_allocator_settings_table_must_be_a_table():
    err = key_error({"master": {"allocator": {"drf": 3}}})
    assert err.key == "master.allocator.drf"


# ----------------------------------------------------------- overrides


def test_dotted_overrides_beat_the_file(tmp_path):
    p = write(tmp_path, '[master]\nlisten = "a:1"\nrefuse_seconds = 2\n')
    c = load(p, {"master.listen": "b:2", "master.allocator.name": "strict-priority",
                 "agent.isolation": ["posix", "lxc"], "log.level": "error"})
    assert c.master.listen == "b:2"
    assert c.master.refuse_seconds == 2.0
    assert c.master.allocator.name == "strict-priority"
    assert c.agent.isolation == ["posix", "lxc"]
    assert c.log.level == "error"


def test_none_overrides_are_ignored(tmp_path):
    p = write(tmp_path, '[master]\nlisten = "a:1"\n')
    assert load(p, {"master.listen": None, "agent.hostname": None}).master.listen == "a:1"


def test_overrides_are_validated_like_the_file():
    with pytest.raises(ConfigError) as ei:
        load(None, {"master.offer_timeout": "soon"})
    assert str(ei.value).startswith("master.offer_timeout:")
    with pytest.raises(ConfigError) as ei:
        load(None, {"master.no_such": 1})
    assert str(ei.value).startswith("master.no_such:")


def test_override_below_a_scalar_is_a_config_error(tmp_path):
    """``master.listen.port`` cannot be set: master.listen is a string. This must be
    a ConfigError naming the key, not a TypeError from the override code."""
    p = write(tmp_path, '[master]\nlisten = "a:1"\n')
    with pytest.raises(ConfigError) as ei:
        load(p, {"master.listen.port": 5})
    assert str(ei.value).startswith("master.listen")


# ----------------------------------------------------------- env var and files


def test_env_var_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv(CONFIG_ENV, str(write(tmp_path, '[agent]\nhostname = "from-env"\n')))
    assert load().agent.hostname == "from-env"


def test_explicit_path_beats_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv(CONFIG_ENV, str(write(tmp_path, '[agent]\nhostname = "env"\n', "env.toml")))
    assert load(write(tmp_path, '[agent]\nhostname = "arg"\n', "arg.toml")).agent.hostname == "arg"


def test_empty_env_var_means_no_file(monkeypatch):
    monkeypatch.setenv(CONFIG_ENV, "")
    assert load() == Config()


def test_env_var_pointing_nowhere_is_an_error(tmp_path, monkeypatch):
    missing = tmp_path / "nope.toml"
    monkeypatch.setenv(CONFIG_ENV, str(missing))
    with pytest.raises(ConfigError) as ei:
        load()
    assert str(ei.value).startswith(str(missing) + ":")
    assert "cannot read" in str(ei.value)


def test_missing_file(tmp_path):
    missing = tmp_path / "missing.toml"
    with pytest.raises(ConfigError) as ei:
        load(missing)
    assert ei.value.key == str(missing)
    assert "cannot read config file" in ei.value.problem


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load(tmp_path)


def test_bad_toml(tmp_path):
    p = write(tmp_path, "[master\nlisten = 1\n")
    with pytest.raises(ConfigError) as ei:
        load(p)
    assert ei.value.key == str(p)
    assert "invalid TOML" in ei.value.problem


def test_errors_inside_a_file_name_the_dotted_key(tmp_path):
    p = write(tmp_path, "[master.allocator]\nname = 3\n")
    with pytest.raises(ConfigError) as ei:
        load(p)
    assert str(ei.value).startswith("master.allocator.name:")


def test_non_utf8_file_is_a_config_error(tmp_path):
    """TOML is UTF-8; a file in another encoding is bad TOML and must be reported as
    a ConfigError naming the file, not leak a UnicodeDecodeError."""
    p = tmp_path / "latin1.toml"
    p.write_bytes('[agent]\nhostname = "bücher"\n'.encode("latin-1"))
    with pytest.raises(ConfigError) as ei:
        load(p)
    assert ei.value.key == str(p)


def test_utf8_file_with_non_ascii_text(tmp_path):
    p = tmp_path / "utf8.toml"
    p.write_bytes('[agent]\nhostname = "bücher-ü"\n'.encode())
    assert load(p).agent.hostname == "bücher-ü"


# ----------------------------------------------------------- master.render_state_in_child


def test_render_state_in_child_defaults_to_true():
    assert Config().master.render_state_in_child is True
    assert from_dict({}).master.render_state_in_child is True
    assert from_dict({"master": {}}).master.render_state_in_child is True


@pytest.mark.parametrize("value", [False, True])
def test_render_state_in_child_loads_a_boolean(tmp_path, value):
    text = f"[master]\nrender_state_in_child = {'true' if value else 'false'}\n"
    c = load(write(tmp_path, text))
    assert c.master.render_state_in_child is value
    assert load(None, {"master.render_state_in_child": value}).master.render_state_in_child is value


@pytest.mark.parametrize("toml_value", ['"yes"', '"false"', "1", "0", "1.0", "[]"])
def test_render_state_in_child_must_be_true_or_false(tmp_path, toml_value):
    p = write(tmp_path, f"[master]\nrender_state_in_child = {toml_value}\n")
    with pytest.raises(ConfigError) as ei:
        load(p)
    err = ei.value
    assert err.key == "master.render_state_in_child"
    assert str(err).startswith("master.render_state_in_child:")
    assert "expected true or false" in err.problem


def test_render_state_in_child_yes_names_the_key_and_the_value():
    err = key_error({"master": {"render_state_in_child": "yes"}})
    assert str(err) == "master.render_state_in_child: expected true or false, got str 'yes'"


def test_every_key_is_documented():
    import dataclasses
    from pathlib import Path

    from mezzo.config import AgentConfig, LogConfig, MasterConfig, QueueConfig, TlsConfig

    docs = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    internal = {"settings", "offer_filter_settings", "isolator_settings", "allocator", "revocation_policy"}
    missing = [f"{cls.__name__}.{f.name}" for cls in (MasterConfig, AgentConfig, LogConfig, TlsConfig, QueueConfig)
               for f in dataclasses.fields(cls) if f.name not in internal and f"| `{f.name}` |" not in docs]
    assert missing == []


def test_log_level_and_format_are_checked_when_the_file_is_read():
    """Not only when logging is set up: `mezzo ps` sets none up and must refuse them too."""
    from mezzo.config import from_dict

    with pytest.raises(ConfigError, match=r"log.level: expected one of debug, info, warning, error, got 'loud'"):
        from_dict({"log": {"level": "loud"}})
    with pytest.raises(ConfigError, match=r"log.format: expected 'console' or 'json', got 'xml'"):
        from_dict({"log": {"format": "xml"}})


def test_keeping_tasks_at_stop_needs_the_journal():
    err = key_error({"agent": {"keep_tasks_on_stop": True, "checkpoint": False}})
    assert err.key == "agent.keep_tasks_on_stop" and "checkpoint" in str(err)
    assert from_dict({"agent": {"keep_tasks_on_stop": True}}).agent.keep_tasks_on_stop


@pytest.mark.parametrize("key", ["event_heartbeat", "file_timeout"])
def test_http_waits_are_at_least_a_tenth_of_a_second(key):
    err = key_error({"master": {"http": {key: 0}}})
    assert err.key == f"master.http.{key}" and "at least 0.1" in str(err)
