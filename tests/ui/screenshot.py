"""Take ``docs/web-ui.png``: the web UI's front page over a small real cluster.

    .venv/bin/python -m tests.ui.screenshot [--out docs/web-ui.png]

Starts a master and three agents (:class:`mezzo.testing.LocalProcessCluster`), two
frameworks running sleeping tasks and a third that asks for nothing (so the page has
something under "why pending"), waits for the tasks to run, and saves what headless
Chromium shows at ``/``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import mezzo
from mezzo.testing import LocalProcessCluster, wait_for

from ..conftest import Recorder
from . import browser
from .test_web_ui import launch_each_task_once

ROOT = Path(__file__).resolve().parents[2]

FRAMEWORKS = {
    "render": {f"render-{i}": "sleep 600" for i in range(5)},
    "etl": {**{f"etl-{i}": "sleep 600" for i in range(3)}, "etl-check": "exit 3", "etl-load": "true"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "web-ui.png")
    args = parser.parse_args()
    if (why := browser.missing()) is not None:
        raise SystemExit(f"cannot take the screenshot: {why}")
    with tempfile.TemporaryDirectory(prefix="mezzo-ui-shot-") as directory:
        cluster = LocalProcessCluster(3, master={"allocation_interval": 0.05}, directory=directory)
        drivers: list[mezzo.SchedulerDriver] = []
        try:
            cluster.start()
            recorders = {}
            for name, tasks in FRAMEWORKS.items():
                recorders[name] = Recorder(on_offers=launch_each_task_once(dict(tasks)))
                drivers.append(
                    mezzo.SchedulerDriver(recorders[name], mezzo.FrameworkInfo(name=name), cluster.master)
                )
            idle = mezzo.SchedulerDriver(
                Recorder(), mezzo.FrameworkInfo(name="nightly-report"), cluster.master
            )
            drivers.append(idle)
            for driver in drivers:
                driver.start()
            idle.set_needs_offers(False)  # suppressed: the front page says why it gets nothing
            wait_for(
                lambda: all(recorders[n].states_of(t) for n, tasks in FRAMEWORKS.items() for t in tasks),
                30,
                "every task to start",
            )
            time.sleep(1.0)  # the allocator's next cycle, so offers and shares settle
            shoot(f"http://{cluster.master}/", args.out)
        finally:
            for driver in drivers:
                driver.stop()
            cluster.stop()
    print(f"wrote {args.out}")


def shoot(url: str, out: Path) -> None:
    chromium = browser.start_chromium(width=1280, height=1000)
    try:
        chromium.get(url)
        WebDriverWait(chromium, 20).until(
            lambda d: "render" in d.find_element(By.ID, "overview").text, "the front page to fill in"
        )
        chromium.save_screenshot(str(out))
    finally:
        chromium.quit()


if __name__ == "__main__":
    main()
