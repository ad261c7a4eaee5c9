"""A framework that never configured logging hears from its drivers only about
problems: warnings and errors on stderr, from the first driver of the process on.

Run as a separate Python process against a real master, because the quiet default
is applied once per process and pytest's own process has structlog configured.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Registers, holds the driver thread in ``registered`` long enough to earn the
# slow-callback warning, prints its own lines and stops.
FRAMEWORK = textwrap.dedent(
    """
    import time
    import mezzo

    class Quiet(mezzo.Scheduler):
        def registered(self, driver, framework_id, master):
            print("framework: registered")
            time.sleep(SLOW)
            driver.stop()

    print("framework: starting")
    status = mezzo.SchedulerDriver(Quiet(), mezzo.FrameworkInfo(name="quiet"), MASTER).run()
    print("framework: done", status.name)
    """
)


def test_first_driver_logs_warnings_only_and_only_on_stderr(make_cluster):
    from mezzo.driver.runtime import SLOW_CALLBACK_SECONDS

    cluster = make_cluster(0)
    script = f"MASTER = {cluster.master!r}\nSLOW = {SLOW_CALLBACK_SECONDS + 0.2!r}\n" + FRAMEWORK
    r = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # stdout is the framework's own: nothing of the driver's there.
    assert r.stdout.splitlines() == [
        "framework: starting",
        "framework: registered",
        "framework: done STOPPED",
    ], r.stdout
    # stderr carries the warning and nothing below it.
    lines = r.stderr.splitlines()
    assert any("callback held the driver thread" in line for line in lines), r.stderr
    assert all("[warning" in line or "[error" in line for line in lines), r.stderr
