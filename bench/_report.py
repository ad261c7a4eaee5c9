"""Writing a benchmark's section of ``docs/benchmarks.md``.

Each benchmark owns one ``## `` section, replaced whole on every run (up to the
next ``## `` heading, or a ``### `` heading, under which prose is written by hand
and kept).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "docs" / "benchmarks.md"


def write_section(heading: str, lines: list[str], path: Path = BENCHMARKS) -> None:
    """Replace (or append) the section titled ``heading`` with ``lines``."""
    text = (
        path.read_text()
        if path.exists()
        else (
            "# Benchmarks\n\nFigures measured on this project's machine. Rerun the command of each "
            "section to refresh it; prose under a table is written by hand.\n\n"
        )
    )
    body = "\n".join([heading, "", *lines]).rstrip("\n") + "\n"
    if heading in text:
        start = text.index(heading)
        ends = [i for i in (text.find("\n### ", start + 1), text.find("\n## ", start + 1)) if i != -1]
        cut = min(ends) + 1 if ends else len(text)
        text = text[:start] + body + ("\n" if cut < len(text) else "") + text[cut:]
    else:
        text = text.rstrip("\n") + "\n\n" + body
    path.write_text(text)
    print(f"wrote {path}")


def require_plotting(parser: argparse.ArgumentParser, writing: bool) -> None:
    """Stop at once (one line, exit 2) when a run that is to update the docs
    could not draw its figures: it would rewrite its tables after many minutes and leave
    the figures stale. Runs with ``--no-write`` plot nothing and need no matplotlib."""
    if not writing:
        return
    try:
        import matplotlib  # noqa: F401 - only whether it imports
    except ImportError:
        print(
            f"{parser.prog}: matplotlib is not installed, so this run's figures in docs/ would go stale: "
            "run it through `make bench` (which installs it), pip install matplotlib, or pass --no-write",
            file=sys.stderr,
        )
        sys.exit(2)


def pyplot():
    """``matplotlib.pyplot`` on the file-only Agg backend, or None (saying so on
    stderr) when matplotlib is not installed: the figures are written either way."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)", file=sys.stderr)
        return None
    return plt


def save_figure(fig, path: Path) -> None:
    """Lay out, write and close a figure made with :func:`pyplot`."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
