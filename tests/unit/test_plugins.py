"""load_plugins and ComponentRegistry: registration, duplicates, lookups, describe()."""

from __future__ import annotations

import types
from importlib import metadata

import pytest
from mezzo.errors import ConfigError, PluginError
from mezzo.hookspecs import Allocator, Component, Isolator, OfferFilter, hookimpl
from mezzo.plugins import KINDS, KNOWN_PROVIDERS, ComponentRegistry, load_plugins


class TestAllocator(Allocator):
    __test__ = False
    name = "test-alloc"
    description = "an allocator for tests"

    def add_framework(self, framework_id, info): ...
    def remove_framework(self, framework_id): ...
    def activate(self, framework_id): ...
    def deactivate(self, framework_id): ...
    def add_agent(self, agent_id, total): ...
    def remove_agent(self, agent_id, total): ...
    def allocated(self, framework_id, resources): ...
    def recovered(self, framework_id, resources): ...
    def allocate(self, cycle): ...


class OtherAllocator(TestAllocator):
    description = "a different class under the same name"


class RackFilter(OfferFilter):
    name = "rack"
    description = "only some racks"

    def __init__(self, settings, *, key):
        self.racks = settings.get("racks", [])
        self.key = key
        for k in settings:
            if k != "racks":
                raise ConfigError(f"{key}.{k}", "unknown setting")

    def refuse(self, framework, agent, free):
        return None


class SameNameIsolator(Isolator):
    name = "test-alloc"  # same name as the allocator: different kind, no clash


def plugin(name: str, *classes, **hooks) -> types.ModuleType:
    mod = types.ModuleType(name)

    @hookimpl
    def mezzo_register_components(registry):
        for cls in classes:
            registry.add(cls)

    if classes:
        mod.mezzo_register_components = mezzo_register_components
    for hook_name, fn in hooks.items():
        setattr(mod, hook_name, hookimpl(fn))
    return mod


# ----------------------------------------------------------- load_plugins


def test_builtins_are_registered_like_plugins():
    p = load_plugins(entry_points=False)
    assert p.registry.names("isolator") == ["posix"]
    assert p.registry.names("offer_filter") == ["agents", "min-free"]
    assert p.registry.names("allocator") == []
    entry = p.registry.entries("isolator")["posix"]
    assert entry.plugin == "mezzo.builtin"


def test_extra_plugin_components_are_registered_with_their_plugin():
    acme = plugin("acme_plugin", TestAllocator, RackFilter, SameNameIsolator)
    p = load_plugins(entry_points=False, extra=(acme,))
    assert p.registry.names("allocator") == ["test-alloc"]
    assert p.registry.names("offer_filter") == ["agents", "min-free", "rack"]
    assert p.registry.names("isolator") == ["posix", "test-alloc"]
    e = p.registry.entries("allocator")["test-alloc"]
    assert e.cls is TestAllocator and e.plugin == "acme_plugin"
    assert p.registry.get("allocator", "test-alloc", key="master.allocator.name") is TestAllocator


def test_duplicate_component_across_plugins_names_both():
    with pytest.raises(PluginError) as ei:
        load_plugins(entry_points=False, extra=(plugin("first_plugin", TestAllocator),
                                                plugin("second_plugin", OtherAllocator)))
    msg = str(ei.value)
    assert "first_plugin" in msg and "second_plugin" in msg and "'test-alloc'" in msg


def test_duplicate_of_a_builtin_name_names_the_builtin():
    class Posix2(Isolator):
        name = "posix"

    with pytest.raises(PluginError) as ei:
        load_plugins(entry_points=False, extra=(plugin("shadow_plugin", Posix2),))
    assert "mezzo.builtin" in str(ei.value) and "shadow_plugin" in str(ei.value)


def test_same_class_registered_twice_is_not_a_duplicate():
    p = load_plugins(entry_points=False, extra=(plugin("a_plugin", TestAllocator, TestAllocator),))
    assert p.registry.names("allocator") == ["test-alloc"]


def test_component_without_name_is_a_plugin_error_naming_the_plugin():
    class Nameless(OfferFilter):
        def refuse(self, framework, agent, free):
            return None

    with pytest.raises(PluginError) as ei:
        load_plugins(entry_points=False, extra=(plugin("nameless_plugin", Nameless),))
    assert "nameless_plugin" in str(ei.value) and "Nameless" in str(ei.value)


@pytest.mark.parametrize("thing", [int, object(), Component])
def test_non_component_is_a_plugin_error(thing):
    with pytest.raises(PluginError, match="not a mezzo component"):
        load_plugins(entry_points=False, extra=(plugin("bad_plugin", thing),))


def test_misspelled_hook_fails_at_load():
    with pytest.raises(PluginError) as ei:
        typo = plugin("typo_plugin", mezzo_task_stauts=lambda framework_id, status: None)
        load_plugins(entry_points=False, extra=(typo,))
    assert "mezzo_task_stauts" in str(ei.value)


def test_hookimpl_with_wrong_signature_fails_at_load_as_plugin_error():
    def mezzo_agent_added(agent, extra):
        pass

    with pytest.raises(PluginError) as ei:
        load_plugins(entry_points=False, extra=(plugin("sig_plugin", mezzo_agent_added=mezzo_agent_added),))
    assert "mezzo_agent_added" in str(ei.value)


def test_hookimpl_with_fewer_arguments_is_fine_and_called():
    seen = []
    observer = plugin("obs_plugin", mezzo_agent_removed=lambda agent_id: seen.append(agent_id))
    p = load_plugins(entry_points=False, extra=(observer,))
    p.hook.mezzo_agent_removed(agent_id="ag-1", reason="lost")
    assert seen == ["ag-1"]


def test_register_hook_that_raises_is_a_plugin_error():
    """Broken plugins raise PluginError (load_plugins docstring), whatever they raise."""
    mod = types.ModuleType("crashing_plugin")

    @hookimpl
    def mezzo_register_components(registry):
        raise RuntimeError("missing dependency")

    mod.mezzo_register_components = mezzo_register_components
    with pytest.raises(PluginError):
        load_plugins(entry_points=False, extra=(mod,))


def test_installed_entry_points_are_loaded():
    names = {ep.name for ep in metadata.entry_points(group="mezzo")}
    p = load_plugins()
    loaded = {name for name, _ in p.pm.list_name_plugin()}
    assert names <= loaded
    for row in p.describe():
        if row["plugin"] in names:
            assert row["distribution"] != "mezzo (built in)"


# ----------------------------------------------------------- lookups and create


def test_unknown_component_lists_installed_and_names_provider():
    p = load_plugins(entry_points=False, extra=(plugin("acme_plugin", TestAllocator),))
    reg = p.registry  # no entry points: drf is not installed here
    with pytest.raises(ConfigError) as ei:
        reg.get("allocator", "drf", key="master.allocator.name")
    err = ei.value
    assert err.key == "master.allocator.name"
    assert str(err).startswith("master.allocator.name:")
    assert "test-alloc" in err.problem
    assert KNOWN_PROVIDERS["drf"] == "mezzo-allocator-drf"
    assert "mezzo-allocator-drf" in err.problem and "pip install mezzo-allocator-drf" in err.problem


def test_unknown_component_without_known_provider():
    reg = ComponentRegistry()
    with pytest.raises(ConfigError) as ei:
        reg.get("isolator", "made-up", key="agent.isolation")
    assert "installed: none" in ei.value.problem
    assert "pip install" not in ei.value.problem
    assert "'made-up'" in ei.value.problem


@pytest.mark.parametrize("name", sorted(KNOWN_PROVIDERS))
def test_every_known_provider_is_named(name):
    with pytest.raises(ConfigError, match=KNOWN_PROVIDERS[name]):
        ComponentRegistry().get("isolator", name, key="agent.isolation")


def test_create_passes_settings_and_key():
    p = load_plugins(entry_points=False, extra=(plugin("acme_plugin", RackFilter),))
    f = p.registry.create("offer_filter", "rack", {"racks": ["r1"]}, key="master.offer_filter.rack")
    assert isinstance(f, RackFilter)
    assert f.racks == ["r1"] and f.key == "master.offer_filter.rack"
    with pytest.raises(ConfigError) as ei:
        p.registry.create("offer_filter", "rack", {"rakcs": 1}, key="master.offer_filter.rack")
    assert str(ei.value).startswith("master.offer_filter.rack.rakcs:")


def test_create_of_missing_component_uses_selected_by_key():
    reg = load_plugins(entry_points=False).registry
    with pytest.raises(ConfigError) as ei:
        reg.create("allocator", "drf", {}, key="master.allocator.drf", selected_by="master.allocator.name")
    assert ei.value.key == "master.allocator.name"
    with pytest.raises(ConfigError) as ei:
        reg.create("allocator", "nope", {}, key="master.allocator.nope")
    assert ei.value.key == "master.allocator.nope"


def test_base_component_rejects_any_setting_naming_it():
    reg = load_plugins(entry_points=False).registry
    iso = reg.create("isolator", "posix", {}, key="agent.isolators.posix")
    assert iso.name == "posix"
    with pytest.raises(ConfigError) as ei:
        reg.create("isolator", "posix", {"strict": True}, key="agent.isolators.posix")
    assert str(ei.value).startswith("agent.isolators.posix.strict:")


def test_kinds():
    assert set(KINDS) == {"allocator", "offer_filter", "revocation_policy", "isolator"}
    reg = ComponentRegistry()
    assert all(reg.names(k) == [] for k in KINDS)


# ----------------------------------------------------------- describe


def test_describe_lists_plugins_and_components():
    p = load_plugins(entry_points=False, extra=(plugin("acme_plugin", TestAllocator, RackFilter),
                                                plugin("quiet_plugin")))
    rows = {r["plugin"]: r for r in p.describe()}
    assert [r["plugin"] for r in p.describe()] == sorted(rows)
    acme = rows["acme_plugin"]
    assert isinstance(acme["distribution"], str) and acme["distribution"]
    assert {(c["kind"], c["name"], c["description"]) for c in acme["components"]} == {
        ("allocator", "test-alloc", "an allocator for tests"),
        ("offer_filter", "rack", "only some racks"),
    }
    builtin = rows["mezzo.builtin"]
    assert builtin["distribution"] == "mezzo (built in)"
    assert {c["name"] for c in builtin["components"]} == {"posix", "agents", "min-free", "fair-share"}
    assert rows["quiet_plugin"]["components"] == []


def test_a_failing_observer_is_counted_by_name_and_spares_the_other_observers():
    from mezzo import hookimpl
    from mezzo.plugins import load_plugins

    calls = []

    class Broken:
        @hookimpl
        def mezzo_task_status(self, framework_id, status):
            calls.append(("broken", framework_id))
            raise RuntimeError("observer bug")

    class Fine:
        @hookimpl
        def mezzo_task_status(self, framework_id, status):
            calls.append(("fine", framework_id))

    broken = Broken()
    plugins = load_plugins(entry_points=False, extra=(broken, Fine()))
    plugins.observe.mezzo_task_status(framework_id="f", status=None)  # must not raise
    plugins.observe.mezzo_task_status(framework_id="g", status=None)
    assert sorted(calls) == [("broken", "f"), ("broken", "g"), ("fine", "f"), ("fine", "g")]
    name = plugins.pm.get_name(broken)
    assert plugins.guard.counts() == {f"{name}.mezzo_task_status": 2}
    plugins.observe.mezzo_agent_removed(agent_id="a", reason="r")  # nobody implements it
