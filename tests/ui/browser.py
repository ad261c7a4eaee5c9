"""Headless Chromium for the web UI's tests and its screenshot (Debian's ``chromium`` and
``chromium-driver``, installed by ``make setup``; Selenium from requirements-dev.txt).

:func:`missing` says why a browser cannot be started (the tests skip with it), and
:func:`start_chromium` starts one that records the page's console, which
:func:`console_errors` reads (and clears).
"""

from __future__ import annotations

import importlib.util
import shutil
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("chromedriver",)


def _which(names: tuple[str, ...]) -> str | None:
    return next((path for path in map(shutil.which, names) if path), None)


def missing() -> str | None:
    """Why no browser can be started here, or None if one can."""
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -r requirements-dev.txt)"
    if _which(BROWSERS) is None:
        return "no chromium on PATH (make setup installs Debian's chromium)"
    if _which(DRIVERS) is None:
        return "no chromedriver on PATH (make setup installs Debian's chromium-driver)"
    return None


def start_chromium(width: int = 1280, height: int = 900) -> Chrome:
    """A headless Chromium whose console messages :func:`console_errors` can read.

    The binaries are given by path, so Selenium never tries to download a driver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _which(BROWSERS) or ""
    for argument in (
        "--headless=new",
        "--no-sandbox",  # the tests may run as root, where Chromium's sandbox refuses to start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=_which(DRIVERS)))


def console_errors(driver: Chrome) -> list[dict[str, Any]]:
    """The console's errors since the last call (failed loads, exceptions, console.error)."""
    return [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
