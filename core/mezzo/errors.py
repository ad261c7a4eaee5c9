"""The root of mezzo's exceptions; each subsystem's errors derive from :class:`MezzoError`."""


class MezzoError(Exception):
    """Base class of every error mezzo raises on purpose."""


class ConfigError(MezzoError):
    """Bad configuration. The message starts with the dotted TOML key, e.g.
    ``master.offer_timeout: expected a number of seconds, got 'soon'``."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


class PluginError(MezzoError):
    """A component named in the configuration is not installed, or a plugin is broken."""
