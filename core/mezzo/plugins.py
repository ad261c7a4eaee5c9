"""Loading plugins and choosing components by name.

:func:`load_plugins` builds the pluggy ``PluginManager``: the built-in plugins of
core (registered like any other, so core has no private back door), then every
entry point in the group ``mezzo``. The :class:`ComponentRegistry` collects the
component classes plugins register; :meth:`ComponentRegistry.create` instantiates
the one a TOML key names, or fails listing what is installed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pluggy

from . import hookspecs
from .errors import ConfigError, PluginError
from .hookspecs import Allocator, Component, Isolator, OfferFilter, RevocationPolicy
from .plugin_guard import PluginGuard

KINDS: dict[str, type[Component]] = {
    "allocator": Allocator,
    "offer_filter": OfferFilter,
    "revocation_policy": RevocationPolicy,
    "isolator": Isolator,
}

BUILTIN_PLUGINS = ("mezzo.builtin",)


@dataclass(frozen=True)
class Registered:
    cls: type[Component]
    plugin: str
    distribution: str


class ComponentRegistry:
    """Component classes by kind and name, with the plugin that registered each."""

    def __init__(self) -> None:
        self._by_kind: dict[str, dict[str, Registered]] = {k: {} for k in KINDS}
        self._current: tuple[str, str] = ("?", "?")

    def add(self, cls: type[Component]) -> None:
        """Register ``cls`` under ``cls.name`` for the kind of its base class."""
        kind = _kind_of(cls)
        if not cls.name:
            raise PluginError(f"plugin {self._current[0]}: {cls.__qualname__} has no name")
        known = self._by_kind[kind]
        if cls.name in known and known[cls.name].cls is not cls:
            raise PluginError(
                f"{kind} {cls.name!r} registered twice: by {known[cls.name].plugin} and by {self._current[0]}"
            )
        known[cls.name] = Registered(cls, *self._current)

    @contextlib.contextmanager
    def registering_for(self, plugin: str, distribution: str) -> Iterator[None]:
        """Attribute what is added meanwhile to ``plugin`` of ``distribution``."""
        self._current = (plugin, distribution)
        try:
            yield
        finally:
            self._current = ("?", "?")

    def names(self, kind: str) -> list[str]:
        return sorted(self._by_kind[kind])

    def entries(self, kind: str) -> dict[str, Registered]:
        return dict(self._by_kind[kind])

    def get(self, kind: str, name: str, *, key: str) -> type[Component]:
        """The class of component ``name``; ConfigError on ``key`` listing the
        installed names and the package that provides the missing one, if known."""
        entry = self._by_kind[kind].get(name)
        if entry is None:
            installed = ", ".join(self.names(kind)) or "none"
            hint = KNOWN_PROVIDERS.get(name)
            extra = f"; it is provided by the package {hint} (pip install {hint})" if hint else ""
            raise ConfigError(key, f"{kind} {name!r} is not installed (installed: {installed}){extra}")
        return entry.cls

    def create(
        self, kind: str, name: str, settings: Mapping[str, Any], *, key: str, selected_by: str | None = None
    ) -> Any:
        """Instantiate component ``name`` of ``kind``.

        ``key`` is the dotted TOML key of the component's settings table (e.g.
        ``master.allocator.drf``), which the component uses in its own errors;
        ``selected_by`` is the key that named the component (e.g.
        ``master.allocator.name``), used when it is not installed (default: ``key``).
        """
        cls = self.get(kind, name, key=selected_by or key)
        return cls(settings, key=key)


def check_settings_tables(plugins: Plugins, kind: str, tables: Mapping[str, Any], prefix: str) -> None:
    """Refuse a settings table for a component that is not installed.

    A table for an installed component that is not selected is fine (an operator
    may keep settings for several allocators and switch between them); a table
    whose name no installed component has is almost always a typo, such as
    ``[master.allocator.dfr]``, which would otherwise be silently ignored.
    """
    installed = plugins.registry.names(kind)
    for name in tables:
        if name not in installed:
            raise ConfigError(
                f"{prefix}.{name}",
                f"settings for {kind} {name!r}, but no installed {kind} has that name "
                f"(installed: {', '.join(installed) or 'none'})",
            )


KNOWN_PROVIDERS = {
    "drf": "mezzo-allocator-drf",
    "strict-priority": "mezzo-allocator-priority",
    "lottery": "mezzo-allocator-lottery",
    "cgroups/cpu": "mezzo-isolator-cgroups",
    "cgroups/mem": "mezzo-isolator-cgroups",
    "lxc": "mezzo-isolator-lxc",
    "network/bandwidth": "mezzo-isolator-netbw",
}
"""Which distribution provides each component name we publish, for error messages."""


def _kind_of(cls: type) -> str:
    for kind, base in KINDS.items():
        if isinstance(cls, type) and issubclass(cls, base):
            return kind
    raise PluginError(
        f"{cls!r} is not a mezzo component (subclass Allocator, OfferFilter, RevocationPolicy or Isolator)"
    )


class Observers:
    """Calls observer hooks so that a failing plugin cannot break the daemon.

    ``observers.mezzo_task_status(framework_id=..., status=...)`` calls every
    implementation, each on its own: an exception is reported through the plugin
    guard (:mod:`mezzo.plugin_guard`: logged with the plugin's name, counted) and
    the other implementations still run, because observers are for metrics and
    audit and the caller is usually halfway through changing the daemon's state.
    A hook nobody implements costs one attribute look-up.
    """

    def __init__(self, pm: pluggy.PluginManager, guard: PluginGuard) -> None:
        self._pm = pm
        self._guard = guard

    def __getattr__(self, name: str) -> Any:
        impls = [(impl.plugin_name, impl.function) for impl in getattr(self._pm.hook, name).get_hookimpls()]
        guard = self._guard
        if not impls:
            safe = _noop
        else:

            def safe(**kwargs: Any) -> None:
                for plugin, function in impls:
                    try:
                        function(**kwargs)
                    except Exception as exc:
                        guard.failed_in(plugin, name, exc)

        self.__dict__[name] = safe
        return safe


def _noop(**kwargs: Any) -> None:
    return None


class Plugins:
    """The loaded plugin manager and its registry; one per daemon.

    ``hook`` is pluggy's hook relay; ``observe`` calls observer hooks safely
    (:class:`Observers`); ``guard`` is the daemon's one boundary for calls into
    plugins (:class:`~mezzo.plugin_guard.PluginGuard`), whose counts the daemon
    shows in its metrics.
    """

    def __init__(self, pm: pluggy.PluginManager, registry: ComponentRegistry) -> None:
        self.pm = pm
        self.hook = pm.hook
        self.guard = PluginGuard()
        self.observe = Observers(pm, self.guard)
        self.registry = registry

    def describe(self) -> list[dict[str, Any]]:
        """Installed plugins and the components each registers (``mezzo plugins``)."""
        out: dict[str, dict[str, Any]] = {}
        for name, plugin in self.pm.list_name_plugin():
            dist = self._distribution(plugin)
            out[name] = {"plugin": name, "distribution": dist, "components": []}
        for kind in KINDS:
            for cname, entry in sorted(self.registry.entries(kind).items()):
                row = out.setdefault(
                    entry.plugin,
                    {"plugin": entry.plugin, "distribution": entry.distribution, "components": []},
                )
                row["components"].append({"kind": kind, "name": cname, "description": entry.cls.description})
        return sorted(out.values(), key=lambda r: r["plugin"])

    def _distribution(self, plugin: Any) -> str:
        for p, dist in self.pm.list_plugin_distinfo():
            if p is plugin:
                return f"{dist.project_name} {dist.version}"
        return "mezzo (built in)"


def load_plugins(*, entry_points: bool = True, extra: tuple[Any, ...] = ()) -> Plugins:
    """Build the plugin manager: built-ins, installed entry points, then ``extra``
    (plugin objects, for tests). Broken plugins raise :class:`PluginError`."""
    import importlib

    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    registry = ComponentRegistry()
    for modname in BUILTIN_PLUGINS:
        pm.register(importlib.import_module(modname), name=modname)
    if entry_points:
        try:
            pm.load_setuptools_entrypoints(hookspecs.PROJECT)
        except Exception as exc:
            raise PluginError(f"a mezzo plugin failed to load: {exc!r}") from exc
    try:
        for plugin in extra:
            pm.register(plugin)
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(str(exc)) from exc
    # Through pluggy, one plugin at a time, so that a clash of names can say which
    # two plugins clash (a single hook call would run every implementation at once).
    dists = {id(p): f"{d.project_name}" for p, d in pm.list_plugin_distinfo()}
    everyone = [plugin for _, plugin in pm.list_name_plugin()]
    implementers = {id(impl.plugin) for impl in pm.hook.mezzo_register_components.get_hookimpls()}
    for name, plugin in pm.list_name_plugin():
        if id(plugin) not in implementers:
            continue
        only_this = pm.subset_hook_caller(
            "mezzo_register_components", remove_plugins=[p for p in everyone if p is not plugin]
        )
        with registry.registering_for(name, dists.get(id(plugin), "mezzo")):
            try:
                only_this(registry=registry)
            except PluginError:
                raise
            except Exception as exc:
                raise PluginError(f"plugin {name} failed to register its components: {exc!r}") from exc
    return Plugins(pm, registry)
