"""The master's web UI in a real browser (headless Chromium) against a real local cluster.

One cluster and one browser for the module: a framework runs a task that prints a line
every half second, one that prints 229 KB and waits, one that exits with status 3, and one
whose name is HTML. The pages must load with nothing on the browser's console, show what
the cluster holds (as text), and the sandbox pager must show the running task's stdout
and then the lines it writes while we watch. Waits are explicit (WebDriverWait); the
pages poll every 2 s, so what a test waits for shows within a few seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import mezzo
from mezzo.testing import LocalProcessCluster, wait_for

from ..conftest import Recorder
from . import browser

pytestmark = pytest.mark.skipif(browser.missing() is not None, reason=f"no browser: {browser.missing()}")

WAIT = 20.0
"""Seconds a page gets to show something (it polls every 2 s; the first poll is at once)."""

TASKS = {
    "follow": "for i in $(seq 1 240); do echo line-$i; sleep 0.5; done",
    "exit3": "echo about to fail; exit 3",
    "html": "true",
    "big": "seq 1 40000; sleep 600",  # 229 KB of stdout: more than the pager shows at first
}
NAMES = {"html": '<img id="injected" src="/nope" onerror="console.error(1)">'}
"""Task names other than ``ui-<id>``: one that would be markup, were the UI to insert HTML."""


class Cluster:
    """The module's cluster, its framework and what that framework saw."""

    def __init__(self, cluster: LocalProcessCluster, recorder: Recorder, url: str) -> None:
        self.cluster = cluster
        self.recorder = recorder
        self.url = url
        """The UI's address, ``http://127.0.0.1:<port>/``."""


def launch_each_task_once(pending: dict[str, str]) -> Any:
    """An ``on_offers`` launching each of ``pending``'s commands once (0.5 cpu, 32 MB), one per offer."""
    lock = threading.Lock()

    def on_offers(driver: mezzo.SchedulerDriver, offers: list[mezzo.Offer]) -> None:
        for offer in offers:
            with lock:
                task_id = next(iter(pending), None)
                command = pending.pop(task_id) if task_id is not None else None
            if task_id is None or command is None:
                driver.decline_offer(offer.offer_id, mezzo.Filters(refuse_seconds=60))
                continue
            task = mezzo.TaskInfo(
                task_id=task_id,
                name=NAMES.get(task_id, f"ui-{task_id}"),
                agent_id=offer.agent_id,
                resources=mezzo.Resources(cpus=0.5, mem=32),
                command=mezzo.CommandInfo(value=command),
            )
            driver.launch_tasks(offer.offer_id, [task], mezzo.Filters(refuse_seconds=0))

    return on_offers


@pytest.fixture(scope="module")
def ui_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("ui-cluster")
    cluster = LocalProcessCluster(2, master={"allocation_interval": 0.01}, directory=str(directory))
    recorder = Recorder(on_offers=launch_each_task_once(dict(TASKS)))
    driver = None
    try:
        cluster.start()
        driver = mezzo.SchedulerDriver(recorder, mezzo.FrameworkInfo(name="ui-test"), cluster.master)
        driver.start()
        wait_for(
            lambda: all("TASK_RUNNING" in recorder.states_of(t) for t in ("follow", "big")),
            20,
            "the follow and big tasks to run",
        )
        wait_for(lambda: recorder.final("exit3") is not None, 20, "the exit3 task to end")
        wait_for(lambda: recorder.final("html") is not None, 20, "the html task to end")
        yield Cluster(cluster, recorder, f"http://{cluster.master}/")
    finally:
        if driver is not None:
            driver.stop()
        cluster.stop()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    driver = browser.start_chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """The browser, checked after the test for errors on its console."""
    browser.console_errors(chromium)  # what an earlier test left is its business
    yield chromium
    assert browser.console_errors(chromium) == []


def open_page(driver: Any, cluster: Cluster, route: str) -> None:
    driver.get(cluster.url + route)


def wait_text(driver: Any, css: str, *texts: str, timeout: float = WAIT) -> str:
    """Wait until the element ``css`` shows every one of ``texts``; its text."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def shown(d: Any) -> str | bool:
        try:
            text = d.find_element(By.CSS_SELECTOR, css).text
        except (NoSuchElementException, StaleElementReferenceException):
            return False
        return text if all(t in text for t in texts) else False

    return str(
        WebDriverWait(driver, timeout, poll_frequency=0.1).until(shown, message=f"{css} never showed {texts}")
    )


def click(driver: Any, selector: str, timeout: float = WAIT, by: str = "css selector") -> None:
    """Click the element ``selector`` (CSS, or ``by="xpath"``) once it can be clicked."""
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    element = WebDriverWait(driver, timeout).until(ec.element_to_be_clickable((by, selector)))
    element.click()


def test_the_front_page_shows_the_cluster_summary(page: Any, ui_cluster: Cluster) -> None:
    open_page(page, ui_cluster, "")
    assert page.title == "mezzo"
    wait_text(page, "#master-card", "Leader", mezzo.__version__)
    wait_text(page, "#agents-card", "Active\n2\n", "Inactive\n0\n", "Draining\n0")
    wait_text(page, "#tasks-card", "running", "failed")
    wait_text(page, "#overview", "Resources", "cpus", "Frameworks", "ui-test")
    assert "error" not in page.find_element("id", "status").get_attribute("class")


@pytest.mark.parametrize("route", ["#/frameworks", "#/agents", "#/tasks", "#/offers", "#/sandbox"])
def test_every_page_loads_without_errors(page: Any, ui_cluster: Cluster, route: str) -> None:
    open_page(page, ui_cluster, route)
    expected = {
        "#/frameworks": ("ui-test", "Why pending"),
        "#/agents": ("agent-1", "agent-2", "active"),
        "#/tasks": ("ui-follow", "ui-exit3"),
        "#/offers": ("Resources",),
        "#/sandbox": ("Sandbox",),
    }[route]
    wait_text(page, "main", *expected)


def test_a_framework_and_an_agent_have_pages_of_their_own(page: Any, ui_cluster: Cluster) -> None:
    open_page(page, ui_cluster, "#/frameworks")
    click(page, "#frameworks a[href^='#/frameworks/']")
    wait_text(page, "#framework", "ui-test", str(ui_cluster.recorder.framework_id))
    wait_text(page, "#framework-tasks", "ui-follow", "ui-exit3")
    open_page(page, ui_cluster, "#/agents")
    click(page, "#agents a[href^='#/agents/']")
    wait_text(page, "#agent", "agent-", "Free")


def test_tables_are_read_a_page_at_a_time(page: Any, ui_cluster: Cluster) -> None:
    open_page(page, ui_cluster, "#/tasks?offset=1")
    wait_text(page, "#tasks .pager", f"2–{len(TASKS)} of {len(TASKS)}", "Previous")
    rows = page.find_elements("css selector", "#tasks tbody tr")
    assert len(rows) == len(TASKS) - 1


def test_a_finished_task_shows_its_exit_code(page: Any, ui_cluster: Cluster) -> None:
    open_page(page, ui_cluster, "#/tasks?state=TASK_FAILED")
    row = wait_text(page, "#tasks tbody", "ui-exit3", "failed")
    assert "ui-follow" not in row  # the state filter
    cells = page.find_elements("css selector", "#tasks tbody td.exit-code")
    assert [c.text for c in cells] == ["3"]


def test_what_the_cluster_says_is_shown_as_text_never_as_markup(page: Any, ui_cluster: Cluster) -> None:
    open_page(page, ui_cluster, "#/tasks?state=TASK_FINISHED")
    wait_text(page, "#tasks tbody", NAMES["html"])
    assert page.find_elements("id", "injected") == []


def open_stdout_of(driver: Any, cluster: Cluster, name: str) -> None:
    """From the running tasks, follow task ``name``'s Sandbox link, then its stdout."""
    open_page(driver, cluster, "#/tasks?state=TASK_RUNNING")
    wait_text(driver, "#tasks tbody", name)
    row = f"//*[@id='tasks']//tr[td[3][normalize-space()='{name}']]"
    click(driver, row + "//a[contains(@class, 'sandbox-link')]", by="xpath")
    wait_text(driver, "#listing", "stdout", "stderr")
    click(driver, "#listing a.file-link[href*='stdout']")


def test_the_sandbox_pager_shows_a_running_tasks_stdout_and_follows_it(
    page: Any, ui_cluster: Cluster
) -> None:
    open_stdout_of(page, ui_cluster, "ui-follow")
    text = wait_text(page, "#file-pager", "line-1\n")
    seen = max(int(line.removeprefix("line-")) for line in text.split() if line.startswith("line-"))
    # Lines the task writes from now on appear without reloading: the pager follows the file.
    wait_text(page, "#file-pager", f"line-{seen + 3}\n", timeout=15)
    assert page.find_element("id", "download").get_attribute("href").endswith("stdout")


def test_the_pager_starts_with_the_last_64_kib_of_a_big_file(page: Any, ui_cluster: Cluster) -> None:
    open_stdout_of(page, ui_cluster, "ui-big")
    wait_text(page, ".pager-note", "not shown")
    text = wait_text(page, "#file-pager", "39999\n40000")
    # Exactly the last 64 KiB: the pager asked for the size (offset=-1), then read from there.
    assert len(text) + len("\n") == 64 * 1024 and text.split("\n")[1] == "29079", text[:20]


def test_a_failing_request_is_told_in_the_status_line_with_the_masters_words(
    chromium: Any, ui_cluster: Cluster
) -> None:
    open_page(
        chromium, ui_cluster, "#/sandbox?agent_id=no-such-agent&path=/frameworks/f/executors/e/runs/latest"
    )
    status = wait_text(chromium, "#status", "/files/browse: 404")
    assert "no-such-agent" in status or "agent" in status, status
    assert "error" in chromium.find_element("id", "status").get_attribute("class")
    # The browser logs the failed load itself; nothing else (no exception of the UI's).
    errors = browser.console_errors(chromium)
    assert errors and all("Failed to load resource" in e["message"] for e in errors), errors


POLLER_PROBE = """
const done = arguments[arguments.length - 1];
import("/ui/js/api.js").then(({ Poller }) => {
  const starts = [];
  let running = 0, overlapped = false, calls = 0;
  const poller = new Poller(async () => {
    starts.push(performance.now());
    overlapped ||= running > 0;
    running += 1;
    await new Promise((resolve) => setTimeout(resolve, 30));  // a slow answer
    running -= 1;
    calls += 1;
    if (calls <= 3) throw new Error("master down");
    if (calls === 5) { poller.stop(); done({ starts, overlapped }); }
  }, { intervalMs: 50, maxBackoffMs: 1000 });
  poller.now();
  poller.now();  // asked again while the first call runs: no second call at once
});
"""


def test_the_poller_never_overlaps_and_backs_off_after_errors(page: Any, ui_cluster: Cluster) -> None:
    """api.js' Poller in the browser, with short intervals: three failures, then successes."""
    open_page(page, ui_cluster, "#/offers")
    page.set_script_timeout(10)
    result = page.execute_async_script(POLLER_PROBE)
    starts = result["starts"]
    assert not result["overlapped"] and len(starts) == 5
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    # Each gap is the 30 ms call plus the wait: 100, 200, 400 ms after failures, 50 after a success.
    assert gaps[0] >= 120 and gaps[1] >= 1.5 * gaps[0] and gaps[2] >= 1.5 * gaps[1], gaps
    assert gaps[3] < gaps[2] / 2, gaps
