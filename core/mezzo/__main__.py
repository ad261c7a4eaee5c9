"""``python -m mezzo`` is the ``mezzo`` command."""

from .cli.main import program

program()
