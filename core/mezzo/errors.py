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


class RequestFailed(MezzoError):
    """A command's request to a daemon failed, for a reason not on its command line: the
    master unreachable, refusing, or not knowing what was named. Commands exit 1 on it
    (a user mistake exits 2); ``status`` is the HTTP status when there was one."""

    status: int | None = None


class MasterUnreachable(RequestFailed):
    """The master did not answer (not running, wrong address, not a mezzo master, timeout)."""


class NotAllowed(RequestFailed):
    """The master refused the request: the caller's principal may not (its ACLs)."""
