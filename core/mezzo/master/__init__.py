"""The master: soft state, allocation cycle, offers, launch validation."""

from .master import Master

__all__ = ["Master"]
