"""Install pymesos 0.3.15 into the environment of the Python that runs this script.

``make setup`` runs it after installing mezzo: the tests that run unmodified pymesos
frameworks against mezzo need it (docs/mesos-compatibility.md). Standard library only.

Why not ``pip install pymesos==0.3.15``: pymesos depends on http-parser, whose last
release (0.9.0, an sdist only) builds a C extension that does not compile on Python
3.11, and its setup.py will not install without it. The package has a pure-Python
parser as well: ``http_parser/http.py`` falls back to ``http_parser.pyparser`` when
the extension is missing, and pymesos handles that parser explicitly. So this script

1. downloads the pinned http-parser sdist with pip (and checks its SHA-256),
2. packs its ``http_parser/*.py`` (nothing compiled) into a wheel of its own, which
   pip installs, so that pip knows http-parser 0.9.0 is there (``pip check`` is
   content, ``pip uninstall http-parser`` works),
3. installs pymesos, six and addict at pinned versions with ``--no-deps`` (kazoo, the
   fourth dependency, is mezzo's own),
4. checks, in a fresh interpreter, that ``import pymesos`` works.

It does nothing (and needs no network) when all of that is in place already. It prints
one line when it installs, and, if anything fails, one line saying what (exit 1).
"""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

PYMESOS = "0.3.15"
SIX = "1.17.0"
ADDICT = "2.4.0"
HTTP_PARSER = "0.9.0"
HTTP_PARSER_SDIST = f"http-parser-{HTTP_PARSER}.tar.gz"
HTTP_PARSER_SHA256 = "441d3a57c6227230f98aa97539da006fda0f8f4880bc4c5cd895ff2138a52621"
"""Of ``http-parser-0.9.0.tar.gz`` as PyPI serves it (the file pip checked its index's hash of)."""

PINNED = {"pymesos": PYMESOS, "six": SIX, "addict": ADDICT, "http-parser": HTTP_PARSER}

IMPORT_CHECK = (
    "import pymesos, six, addict\n"
    "from http_parser.http import HttpParser\n"
    "from pymesos import MesosSchedulerDriver\n"
    f"assert pymesos.__VERSION__ == {PYMESOS!r}, pymesos.__VERSION__\n"
)
"""What must work afterwards (pymesos.process imports http_parser.http at import time)."""

PIP_NETWORK = ["--retries", "2", "--timeout", "20"]
"""Fail within a minute or so when the index cannot be reached, rather than after pip's
default retries (or a site's longer timeout)."""


class Failed(Exception):
    """One line for the user: what failed."""


def main() -> int:
    if sys.prefix == sys.base_prefix:
        print(
            f"{Path(__file__).name}: run it with a virtual environment's python (make setup does)",
            file=sys.stderr,
        )
        return 1
    if installed() and imports_work() is None:
        return 0
    try:
        install()
        problem = imports_work()
        if problem is not None:
            raise Failed(f"installed, but a fresh interpreter cannot import pymesos: {problem}")
    except Failed as exc:
        print(f"{Path(__file__).name}: {exc}", file=sys.stderr)
        return 1
    return 0


def installed() -> bool:
    """Whether every pinned distribution is installed at its pinned version."""
    for name, version in PINNED.items():
        try:
            if metadata.version(name) != version:
                return False
        except metadata.PackageNotFoundError:
            return False
    return True


def imports_work() -> str | None:
    """None if a fresh interpreter imports pymesos and its parser; else the last line of its error."""
    done = subprocess.run([sys.executable, "-c", IMPORT_CHECK], capture_output=True, text=True, check=False)
    return None if done.returncode == 0 else last_line(done.stderr)


def install() -> None:
    print(
        f"installing pymesos {PYMESOS} with http-parser {HTTP_PARSER}'s pure-Python parser ({Path(__file__).name})"
    )
    with tempfile.TemporaryDirectory(prefix="mezzo-pymesos-") as tmp:
        work = Path(tmp)
        pip(
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            str(work),
            f"http-parser=={HTTP_PARSER}",
            *PIP_NETWORK,
            what=f"download http-parser=={HTTP_PARSER}",
        )
        sdist = work / HTTP_PARSER_SDIST
        if not sdist.is_file():
            raise Failed(f"pip download left no {HTTP_PARSER_SDIST} in {work}")
        digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
        if digest != HTTP_PARSER_SHA256:
            raise Failed(f"{HTTP_PARSER_SDIST} has SHA-256 {digest}, expected {HTTP_PARSER_SHA256}")
        wheel = pure_python_wheel(sdist, work)
        pip(
            "install",
            "--no-deps",
            f"pymesos=={PYMESOS}",
            f"six=={SIX}",
            f"addict=={ADDICT}",
            *PIP_NETWORK,
            what=f"install pymesos=={PYMESOS}, six=={SIX} and addict=={ADDICT}",
        )
        pip(
            "install",
            "--no-deps",
            "--no-index",
            "--force-reinstall",
            str(wheel),
            what=f"install the pure-Python http-parser {HTTP_PARSER}",
        )


def pip(*args: str, what: str) -> None:
    """Run pip quietly; on failure :class:`Failed` with its last error line."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "-q", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        hint = "" if "--no-index" in args else " (is PyPI reachable?)"
        raise Failed(f"cannot {what} with pip{hint}: {last_line(done.stderr or done.stdout)}")


def pure_python_wheel(sdist: Path, into: Path) -> Path:
    """A wheel of the sdist's ``http_parser/*.py`` (and its licence), nothing compiled."""
    prefix = f"http-parser-{HTTP_PARSER}/"
    files: dict[str, bytes] = {}
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            name = member.name
            if not member.isfile() or not name.startswith(prefix):
                continue
            inner = name[len(prefix) :]
            package_dir, _, file = inner.rpartition("/")
            if package_dir == "http_parser" and file.endswith(".py"):
                target = inner
            elif inner in ("LICENSE", "NOTICE"):
                target = f"{dist_info()}/{inner}"
            else:
                continue
            extracted = tar.extractfile(member)
            assert extracted is not None
            files[target] = extracted.read()
    if "http_parser/pyparser.py" not in files or "http_parser/http.py" not in files:
        raise Failed(f"{sdist.name} holds no http_parser/pyparser.py and http.py")
    files[f"{dist_info()}/METADATA"] = (
        "Metadata-Version: 2.1\n"
        "Name: http-parser\n"
        f"Version: {HTTP_PARSER}\n"
        "Summary: http request/response parser: the pure-Python files of the sdist only (no C "
        "extension), packed by mezzo's tests/v1/install_pymesos.py\n"
        "Home-page: http://github.com/benoitc/http-parser\n"
        "License: MIT\n"
    ).encode()
    files[f"{dist_info()}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: mezzo tests/v1/install_pymesos.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = io.StringIO()
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.write(f"{name},sha256={digest},{len(data)}\n")
    record.write(f"{dist_info()}/RECORD,,\n")
    files[f"{dist_info()}/RECORD"] = record.getvalue().encode()
    wheel = into / f"http_parser-{HTTP_PARSER}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


def dist_info() -> str:
    return f"http_parser-{HTTP_PARSER}.dist-info"


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["no output"])[-1]


if __name__ == "__main__":
    sys.exit(main())
