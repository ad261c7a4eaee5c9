"""docs/hooks.md is rendered from core/mezzo/hookspecs.py (and the guide text in
docs/hooks.md.in) by docs/hooks_doc.py; this fails when the committed page is not
what the script renders now, e.g. after a docstring or a hook changed."""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(scope="module")
def hooks_doc() -> ModuleType:
    # The script is no part of an installed package: load it from its file (registered
    # in sys.modules first, as dataclasses needs to find its module).
    name = "_mezzo_docs_hooks_doc"
    spec = importlib.util.spec_from_file_location(name, DOCS / "hooks_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def test_hooks_md_is_what_hookspecs_renders(hooks_doc):
    rendered = hooks_doc.render()
    current = (DOCS / "hooks.md").read_text()
    if current != rendered:
        diff = difflib.unified_diff(
            current.splitlines(), rendered.splitlines(), "docs/hooks.md", "rendered now", lineterm="", n=1
        )
        shown = "\n".join(list(diff)[:30])
        pytest.fail(
            "docs/hooks.md is out of date with core/mezzo/hookspecs.py or docs/hooks.md.in: "
            f"regenerate it with `{hooks_doc.REGENERATE}` and commit it.\n{shown}",
            pytrace=False,
        )


def test_every_hookspec_and_class_is_rendered(hooks_doc):
    rendered = hooks_doc.render()
    for item in hooks_doc.read_items(hooks_doc.SOURCE.read_text()):
        assert f"# `{item.name}`" in rendered, item.name


def test_rest_markup_becomes_markdown(hooks_doc):
    md = hooks_doc.markdown
    assert md("Uses ``x`` and :class:`~mezzo.hookspecs.Holder`, :meth:`Allocator.allocated`.") == (
        "Uses `x` and `Holder`, `Allocator.allocated`."
    )
    assert md("A ``literal\nacross lines``.") == "A `literal\nacross lines`."
    assert md("In TOML::\n\n    [master]\n    name = 1\n\nAfter.") == (
        "In TOML:\n\n```\n[master]\nname = 1\n```\n\nAfter."
    )
