"""A folder named ``mezzo`` in the current directory must not hide the installed package.

Someone clones the repository into ~/src/mezzo and runs a script in ~/src: Python puts
the script's directory first on sys.path, and the clone, a folder without
``__init__.py``, is a candidate namespace package ``mezzo``. The import system takes a
regular package found anywhere on sys.path over it, but not one that only an import
hook installed after the path search can find, which is what a default setuptools
editable install of a flat layout is. The distributions' ``package-dir`` makes
editable installs a sys.path entry instead (see core/pyproject.toml).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """\
import mezzo
print(mezzo.__file__)
print(mezzo.SchedulerDriver.__module__)
"""


def test_a_clone_named_mezzo_next_to_a_script_does_not_shadow_the_package(tmp_path: Path):
    clone = tmp_path / "mezzo"  # what a clone looks like to the import system
    for folder in ("core/mezzo", "plugins", "docs"):
        (clone / folder).mkdir(parents=True)
    (clone / "README.md").write_text("# mezzo\n")
    (tmp_path / "s.py").write_text(SCRIPT)
    # -E: the installed package only, not one PYTHONPATH might point at.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    r = subprocess.run(
        [sys.executable, "-E", "s.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, f"`import mezzo` next to a folder named mezzo failed:\n{r.stderr}"
    module_file, driver_module = r.stdout.split()
    assert Path(module_file).name == "__init__.py"
    assert tmp_path not in Path(module_file).parents, module_file
    assert driver_module == "mezzo.driver.scheduler"
