"""Tasks run as their unix users (``agent.switch_user``): a real agent, run as root, with
real users and real processes (a scripted master).

A task with no user runs as ``nobody``; the framework's user and the command's own are
honoured; sandboxes are their user's, 0750, under directories other users may pass
through but not list, so a task cannot read another user's sandbox; a user the host
does not have fails the task, naming the user and the agent; ``switch_user = false``
runs everything as root; a custom executor runs as its user and registers with its token;
the exit status a restarted agent reads is out of the task user's reach, and so is
anything the agent reads from the sandbox.

The work dirs are made in a directory others may pass through (pytest's own temporary
directory is root's, 0700): otherwise no task user could reach its sandbox by path, and
"cannot read another task's sandbox" would hold for the wrong reason.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import threading
import uuid
from pathlib import Path

import pytest
from agent_harness import (
    FRAMEWORK,
    ScriptedMaster,
    agent_config,
    command_task,
    name,
    run,
    running_agent,
    wait_until,
)

import mezzo
from mezzo.agent.exit_wrapper import exit_file_for, read_exit_file
from mezzo.agent.work_dir import untraversable_ancestor
from mezzo.testing import to_toml
from mezzo.wire.ttypes import CommandInfo, ExecutorInfo, FrameworkInfo, TaskInfo

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: only an agent running as root switches users (CI runs as root)"
)


@pytest.fixture
def shared_tmp():
    """A temporary directory (root's, 0755) that other users may pass through."""
    path = Path(tempfile.mkdtemp(prefix="mezzo-switch-user-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_user():
    """``make_user()``: a new system user (no home directory made, no login), removed at the
    end of the test; returns its name."""
    made: list[str] = []

    def make() -> str:
        user = f"mz{uuid.uuid4().hex[:10]}"
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--home-dir", f"/nonexistent/{user}",
             "--shell", "/usr/sbin/nologin", user],
            check=True, capture_output=True,
        )
        made.append(user)
        return user

    yield make
    for user in made:
        subprocess.run(["userdel", user], check=False, capture_output=True)


def _framework(user: str = "", fid: str = FRAMEWORK.framework_id) -> FrameworkInfo:
    return FrameworkInfo(name="switch-user-test", framework_id=fid, user=user)


def _sandbox(agent, task_id: str, fid: str = FRAMEWORK.framework_id) -> Path:
    runs = Path(agent.config.work_dir, "frameworks", fid, "executors", task_id, "runs")
    (box,) = [p for p in runs.iterdir() if p.is_dir()]
    return box


async def _final(master: ScriptedMaster, task_id: str, timeout: float = 15.0):
    return await master.wait_final(task_id, timeout)


def test_a_task_with_no_user_runs_as_nobody_in_a_sandbox_of_its_own(shared_tmp):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(shared_tmp, master.address)) as agent:
            master.agent.run_task(_framework(), command_task(
                "t", 'id -un; id -gn; echo "$HOME $USER $LOGNAME"; id -un > "$MEZZO_SANDBOX/who"'))
            final = await _final(master, "t")
            assert name(final.state) == "TASK_FINISHED", final
            assert final.data.decode().splitlines() == ["nobody", "nogroup", "/nonexistent nobody nobody"]
            box = _sandbox(agent, "t")
            nobody = pwd.getpwnam("nobody")
            st = box.stat()
            assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (nobody.pw_uid, nobody.pw_gid, 0o750)
            assert (box / "who").read_text() == "nobody\n" and (box / "who").stat().st_uid == nobody.pw_uid
            for output in ("stdout", "stderr"):
                assert (box / output).stat().st_uid == nobody.pw_uid
            # The directories on the way are root's: passable, not listable.
            work = Path(agent.config.work_dir)
            for d in [work, *list(box.parents)[: len(box.relative_to(work).parts) - 1]]:
                st = d.stat()
                assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o711), d
            assert stat.S_IMODE((work / "meta").stat().st_mode) == 0o700
        await master.close()

    run(main())


def test_the_framework_user_and_the_command_user_are_honoured(shared_tmp, make_user):
    user = make_user()

    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(shared_tmp, master.address)) as agent:
            master.agent.run_task(_framework(user), command_task("fw", "id -un; echo $HOME"))
            master.agent.run_task(_framework(user), command_task("cmd", "id -un", user="daemon"))
            # The command's environment wins over the user's identity variables.
            master.agent.run_task(_framework(user), command_task("env", "echo $HOME", environment={"HOME": "/x"}))
            fw, cmd, env = [await _final(master, t) for t in ("fw", "cmd", "env")]
            assert (name(fw.state), fw.data) == ("TASK_FINISHED", f"{user}\n/nonexistent/{user}\n".encode())
            assert (name(cmd.state), cmd.data) == ("TASK_FINISHED", b"daemon\n")
            assert env.data == b"/x\n"
            assert _sandbox(agent, "cmd").stat().st_uid == pwd.getpwnam("daemon").pw_uid
        await master.close()

    run(main())


def test_a_task_cannot_read_or_find_another_users_sandbox(shared_tmp, make_user):
    user = make_user()

    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(shared_tmp, master.address)) as agent:
            master.agent.run_task(_framework(user), command_task(
                "secret", "echo s3cret > secret; while [ ! -e done ]; do sleep 0.05; done"))
            await master.wait_state("secret", "TASK_RUNNING")
            box = _sandbox(agent, "secret")
            work = agent.config.work_dir
            probe = (
                # Its own sandbox is reachable by path...
                'cd "$MEZZO_SANDBOX" && echo own-ok; '
                # ...the other user's is not, and no directory on the way can be listed.
                f'cat {box}/secret 2>/dev/null || echo read-denied; '
                f'ls {box} >/dev/null 2>&1 || echo list-sandbox-denied; '
                f'ls {os.path.dirname(box)} >/dev/null 2>&1 || echo list-runs-denied; '
                f'ls {work} >/dev/null 2>&1 || echo list-work-denied; '
                f'ls {work}/meta >/dev/null 2>&1 || echo meta-denied'
            )
            master.agent.run_task(_framework(), command_task("probe", probe))
            final = await _final(master, "probe")
            assert final.data.decode().split() == [
                "own-ok", "read-denied", "list-sandbox-denied", "list-runs-denied", "list-work-denied",
                "meta-denied"], final
            (box / "done").touch()
            assert name((await _final(master, "secret")).state) == "TASK_FINISHED"
        await master.close()

    run(main())


def test_an_unknown_user_fails_the_task_naming_the_user_and_the_agent(shared_tmp):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(shared_tmp, master.address)) as agent:
            master.agent.run_task(_framework("no-such-user-mezzo"), command_task("t", "true"))
            final = await _final(master, "t")
            assert name(final.state) == "TASK_FAILED"
            assert final.reason == "user_unknown"
            assert final.message == (
                "user 'no-such-user-mezzo' does not exist on agent agent-1 (test-host): the task cannot run as it")
            assert master.states("t") == ["TASK_FAILED"]
            runs = Path(agent.config.work_dir, "frameworks", FRAMEWORK.framework_id, "executors", "t", "runs")
            assert not runs.exists()  # nothing was made for it
            # An executor's tasks fail alike, and the master hears the executor is gone.
            task = TaskInfo(task_id="e", name="e", agent_id="agent-1", resources=mezzo.Resources(cpus=0.1, mem=16),
                            executor=ExecutorInfo(executor_id="x", framework_id=FRAMEWORK.framework_id,
                                                  command=CommandInfo(value="true", user="no-such-user-mezzo")))
            master.agent.run_task(_framework(), task)
            final = await _final(master, "e")
            assert (name(final.state), final.reason) == ("TASK_FAILED", "user_unknown")
            assert "'no-such-user-mezzo'" in final.message and "agent-1" in final.message
            await wait_until(lambda: master.called("executor_exited"), what="executor_exited")
        await master.close()

    run(main())


def test_switch_user_off_runs_tasks_as_root(shared_tmp):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(shared_tmp, master.address, switch_user=False)) as agent:
            master.agent.run_task(_framework("nobody"), command_task("t", "id -u"))
            final = await _final(master, "t")
            assert (name(final.state), final.data) == ("TASK_FINISHED", b"0\n")
            box = _sandbox(agent, "t")
            assert box.stat().st_uid == 0 and stat.S_IMODE(box.stat().st_mode) == 0o750
            assert stat.S_IMODE(Path(agent.config.work_dir).stat().st_mode) == 0o700
        await master.close()

    run(main())


def test_without_checkpointing_the_child_drops_to_the_user_itself(shared_tmp):
    """No exit wrapper: the process the agent forks becomes the user after the preexec
    functions and execs the command directly (no setpriv)."""

    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(shared_tmp, master.address, checkpoint=False)) as agent:
            master.agent.run_task(_framework(), command_task(
                "t", "id -un; id -G; grep -E '^(Uid|Gid|CapEff)' /proc/self/status"))
            final = await _final(master, "t")
            assert name(final.state) == "TASK_FINISHED", final
            lines = final.data.decode().splitlines()
            assert lines[:2] == ["nobody", "65534"]
            assert lines[2].split()[1:] == ["65534"] * 4  # real, effective, saved, fs
            assert lines[3].split()[1:] == ["65534"] * 4
            assert lines[4].split()[1] == "0000000000000000"  # no capability left
            assert not list(Path(agent.config.work_dir).rglob("*.mezzo-exit"))
        await master.close()

    run(main())


def test_the_exit_status_is_out_of_the_task_users_reach(shared_tmp):
    """The exit wrapper runs as root and writes beside the sandbox, in a directory of
    root's: the task can neither write that file nor plant a symlink for it, nor signal
    its wrapper; what the agent reads back from the sandbox is never followed through a
    link the task planted."""

    async def main():
        master = await ScriptedMaster().start()
        secret = shared_tmp / "root-only"
        secret.write_text("root's secret\n")
        secret.chmod(0o600)
        async with running_agent(agent_config(shared_tmp, master.address)) as agent:
            command = textwrap.dedent(f"""\
                exit_file="$MEZZO_SANDBOX.mezzo-exit"
                {{
                  echo 0 > "$exit_file" 2>/dev/null || echo cannot-write-exit-file
                  ln -s /etc/passwd "$exit_file" 2>/dev/null || echo cannot-plant-link
                  kill -TERM $PPID 2>/dev/null || echo cannot-signal-wrapper
                }} > probe.log
                # Replace stdout (this process keeps writing to the file it had) with a link
                # to a file only root reads, and stderr with a FIFO.
                rm stdout stderr; ln -s {secret} stdout; mkfifo stderr
                exit 3
            """)
            master.agent.run_task(_framework(), command_task("t", command))
            final = await _final(master, "t")
            assert (name(final.state), final.exit_code) == ("TASK_FAILED", 3), final
            assert final.data is None  # the agent did not read through the planted link
            box = _sandbox(agent, "t")
            exit_file = Path(exit_file_for(str(box)))
            assert exit_file.parent == box.parent
            assert exit_file.stat().st_uid == 0 and not exit_file.is_symlink()
            assert read_exit_file(str(exit_file)) == 3
            assert (box / "probe.log").read_text().split() == [
                "cannot-write-exit-file", "cannot-plant-link", "cannot-signal-wrapper"]
            assert os.readlink(box / "stdout") == str(secret)  # the agent left the link alone
            assert secret.stat().st_uid == 0 and secret.read_text() == "root's secret\n"
        await master.close()

    run(main())


def test_a_task_for_an_executor_of_another_user_is_refused(shared_tmp):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(shared_tmp, master.address)):
            def task(tid: str, user: str) -> TaskInfo:
                return TaskInfo(task_id=tid, name=tid, agent_id="agent-1", resources=mezzo.Resources(cpus=0.1, mem=16),
                                executor=ExecutorInfo(executor_id="x", framework_id=FRAMEWORK.framework_id,
                                                      command=CommandInfo(value="sleep 30", user=user)))

            master.agent.run_task(_framework(), task("a", "nobody"))
            master.agent.run_task(_framework(), task("b", "daemon"))
            final = await _final(master, "b")
            assert (name(final.state), final.reason) == ("TASK_ERROR", "executor_user_mismatch")
            assert final.message == "executor 'x' runs as user 'nobody', not as 'daemon', the task's user"
        await master.close()

    run(main())


# -- a custom executor as another user ---------------------------------------------------


_IMPORTABLE: list[Path] = []
"""The directory of :func:`_importable_copy`, made once per test session."""

_EXECUTOR_IMPORTS = "import mezzo, mezzo.driver, structlog; mezzo.ExecutorDriver"
"""What an executor written with mezzo imports."""
_COPIED_IMPORTS = (
    f"{_EXECUTOR_IMPORTS}; import mezzo.cli.main, mezzo.agent.agent, mezzo.http.agent_api, mezzo.plugins; "
    "mezzo.plugins.load_plugins()"
)
"""What is copied: an executor's imports, and an agent's with its plugins (found through their
distributions' entry points, so the ``.dist-info`` directories are copied too)."""


def _importable_copy() -> Path:
    """mezzo and the packages an executor imports, copied into a directory (root's, 0755)
    that any user may read: the checkout and its venv may lie below a directory only root
    may pass (a CI clone, ``mktemp -d``, /root), and this test must not depend on where."""
    if _IMPORTABLE:
        return _IMPORTABLE[0]
    probe = (
        f"import sys; {_COPIED_IMPORTS}\n"
        "for name, module in list(sys.modules.items()):\n"
        "    path = getattr(module, '__file__', None) or ''\n"
        "    if '.' not in name and path and not path.startswith(sys.base_prefix):\n"
        "        print(path)\n"
    )
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    dest = Path(tempfile.mkdtemp(prefix="mezzo-importable-"))
    atexit.register(shutil.rmtree, dest, True)
    dest.chmod(0o755)
    for line in found.stdout.split():
        path = Path(line)
        if path.name == "__init__.py":
            shutil.copytree(path.parent, dest / path.parent.name, dirs_exist_ok=True)
        else:
            shutil.copy2(path, dest / path.name)
    purelib = Path(sysconfig.get_paths()["purelib"])
    for info in purelib.glob("*.dist-info"):
        shutil.copytree(info, dest / info.name, dirs_exist_ok=True)
    for copied in dest.rglob("*"):
        copied.chmod(0o755 if copied.is_dir() else 0o644)
    _IMPORTABLE.append(dest)
    return dest


def _interpreter_for(user: str) -> list[str] | None:
    """An argv prefix running Python with mezzo importable, as ``user``: this interpreter if
    that user may run it, else the system's python3 of the same version (the test
    interpreter may live under /root, 0700), with :func:`_importable_copy` on its path."""
    candidates = [sys.executable, f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"]
    site = str(_importable_copy())
    for python in candidates:
        argv = [python, "-c", f"import site; site.addsitedir({site!r}); {_EXECUTOR_IMPORTS}"]
        probe = subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--", *argv],
                               capture_output=True, cwd="/")
        if probe.returncode == 0:
            return [python, "-c", f"import site, runpy, sys; site.addsitedir({site!r}); "
                                  "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"]
    return None


EXECUTOR = '''
import os
import mezzo
from mezzo import TaskState, TaskStatus


class WhoAmI(mezzo.Executor):
    def launch_task(self, driver, task):
        who = f"{os.getuid()} {os.getgid()} {os.environ['USER']} {os.environ['HOME']}"
        driver.send_status_update(TaskStatus(task_id=task.task_id, state=TaskState.TASK_FINISHED, data=who.encode()))


mezzo.ExecutorDriver(WhoAmI()).run()
'''


def test_a_custom_executor_runs_as_its_user_and_registers_with_its_token(shared_tmp, make_user):
    user = make_user()
    python = _interpreter_for(user)
    if python is None:
        pytest.skip(f"no Python with mezzo that user {user!r} may run (this one is not theirs to run)")
    script = shared_tmp / "whoami_executor.py"
    script.write_text(EXECUTOR)
    script.chmod(0o644)

    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(shared_tmp, master.address)) as agent:
            task = TaskInfo(
                task_id="e", name="e", agent_id="agent-1", resources=mezzo.Resources(cpus=0.1, mem=16),
                executor=ExecutorInfo(executor_id="whoami", framework_id=FRAMEWORK.framework_id,
                                      command=CommandInfo(value=python[0], arguments=[*python[1:], str(script)],
                                                          shell=False)))
            master.agent.run_task(_framework(user), task)
            final = await _final(master, "e", timeout=30)
            pw = pwd.getpwnam(user)
            assert name(final.state) == "TASK_FINISHED", final
            assert final.data.decode() == f"{pw.pw_uid} {pw.pw_gid} {user} /nonexistent/{user}"
            box = _sandbox(agent, "whoami")
            assert box.stat().st_uid == pw.pw_uid
        await master.close()

    run(main(), timeout=60)



class OneExecutorTask(mezzo.Scheduler):
    """Launches one task on a custom executor running ``argv`` and keeps its final update."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.launched = False
        self.final = None
        self.done = threading.Event()

    def resource_offers(self, driver, offers):
        for offer in offers:
            if self.launched:
                driver.decline_offer(offer.offer_id, mezzo.Filters(refuse_seconds=60))
                continue
            self.launched = True
            executor = ExecutorInfo(executor_id="whoami", command=CommandInfo(
                value=self.argv[0], arguments=self.argv[1:], shell=False), resources=mezzo.Resources(cpus=0.1, mem=32))
            driver.launch_tasks([offer.offer_id], [TaskInfo(task_id="e", name="e", agent_id=offer.agent_id,
                                                            resources=mezzo.Resources(cpus=0.1, mem=16),
                                                            executor=executor)])

    def status_update(self, driver, status):
        if mezzo.is_terminal(status.state):
            self.final = status
            self.done.set()


TLS_EXECUTOR = '''
import os
import mezzo
from mezzo import TaskState, TaskStatus


class WhoAmI(mezzo.Executor):
    def launch_task(self, driver, task):
        said = f"{os.getuid()} {os.environ['MEZZO_TLS_CA']}"
        driver.send_status_update(TaskStatus(task_id=task.task_id, state=TaskState.TASK_FINISHED, data=said.encode()))


mezzo.ExecutorDriver(WhoAmI()).run()
'''


def test_an_executor_of_another_user_checks_its_tls_agent_against_a_copy_of_the_ca(
        shared_tmp, make_user, mezzo_cluster):
    """The agent's CA may be where only root reads it (here, as in ``mezzo local``: a tls
    directory, 0700): an executor of another user gets a copy in its sandbox, and reaches
    its agent over TLS."""
    user = make_user()
    python = _interpreter_for(user)
    if python is None:
        pytest.skip(f"no Python with mezzo that user {user!r} may run (this one is not theirs to run)")
    script = shared_tmp / "tls_executor.py"
    script.write_text(TLS_EXECUTOR)
    script.chmod(0o644)
    cluster = mezzo_cluster(agents=1, tls=True, master={"allocation_interval": 0.01},
                            directory=str(shared_tmp / "cluster"))
    assert cluster.tls is not None and untraversable_ancestor(cluster.tls.ca)  # out of the user's reach
    sched = OneExecutorTask([*python, str(script)])
    driver = mezzo.SchedulerDriver(sched, FrameworkInfo(name="tls-user", user=user), cluster.master,
                                   tls=cluster.client_tls("fw-1"))
    driver.start()
    try:
        assert sched.done.wait(30), "the executor's task did not end"
    finally:
        driver.stop()
        driver.join()
    final = sched.final
    stderr = [p.read_text()[-2000:] for p in cluster.dir.glob("agent-1/frameworks/*/executors/*/runs/*/stderr")]
    assert name(final.state) == "TASK_FINISHED", (final, stderr)
    uid, ca = final.data.decode().split()
    assert int(uid) == pwd.getpwnam(user).pw_uid
    copy = Path(ca)
    assert copy.name == ".mezzo-tls-ca.pem" and copy.parent.stat().st_uid == int(uid)
    assert copy.read_bytes() == Path(cluster.tls.ca).read_bytes()


def test_an_agent_not_running_as_root_runs_tasks_as_itself_and_says_so_once(shared_tmp, make_user):
    """switch_user on (the default), the agent a plain user's: one warning at start, and a
    task naming another user runs as the agent's user in a private work dir."""
    user = make_user()
    pw = pwd.getpwnam(user)
    python = _interpreter_for(user)
    if python is None:
        pytest.skip(f"no Python with mezzo that user {user!r} may run (this one is not theirs to run)")
    home = shared_tmp / "agent"
    home.mkdir()
    os.chown(home, pw.pw_uid, pw.pw_gid)

    async def main():
        master = await ScriptedMaster().start()
        config = home / "mezzo.toml"
        config.write_text(to_toml({"agent": {
            "master": master.address, "listen": "127.0.0.1:0", "hostname": "test-host",
            "work_dir": str(home / "work"), "resources": "cpus:1;mem:256", "reconnect_interval": 0.05}}))
        log = shared_tmp / "agent.log"
        site = str(_importable_copy())
        code = (f"import site, runpy, sys; site.addsitedir({site!r}); "
                f"sys.argv = ['mezzo', 'agent', '--config', {str(config)!r}]; runpy.run_module('mezzo', run_name='__main__')")
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", "--",
                 python[0], "-c", code],
                stdout=out, stderr=subprocess.STDOUT, cwd=home, start_new_session=True,
                env={"PATH": os.environ["PATH"], "PYTHONUNBUFFERED": "1"})
        try:
            await wait_until(lambda: master.called("register_agent"), 20, "the agent to register")
            master.agent.run_task(_framework("daemon"), command_task("t", "id -un"))
            final = await _final(master, "t")
            assert (name(final.state), final.data) == ("TASK_FINISHED", f"{user}\n".encode())
            said = log.read_text()
            assert said.count("agent.switch_user is on but the agent does not run as root") == 1, said
            assert stat.S_IMODE((home / "work").stat().st_mode) == 0o700
        finally:
            proc.terminate()
            proc.wait(20)
            await master.close()

    run(main(), timeout=60)


def test_variables_that_steer_a_shell_never_reach_the_root_exit_wrapper(shared_tmp):
    """Where /bin/sh is bash, an exported function or SHELLOPTS=xtrace with a PS4 of the
    framework's would run in the exit wrapper, as root: a switched task's environment
    loses them (its other variables it keeps)."""

    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(shared_tmp, master.address)):
            environment = {"BASH_FUNC_echo%%": "() { id > /tmp/owned; }", "SHELLOPTS": "xtrace",
                           "PS4": "$(id > /tmp/owned)", "BASH_ENV": "/tmp/x", "ENV": "/tmp/x", "KEPT": "yes"}
            master.agent.run_task(_framework(), command_task("t", "env", environment=environment))
            final = await _final(master, "t")
            names = {line.split("=", 1)[0] for line in final.data.decode().splitlines()}
            assert "KEPT" in names
            assert not names & {"BASH_FUNC_echo%%", "SHELLOPTS", "PS4", "BASH_ENV", "ENV"}, names
        await master.close()

    run(main())


def test_loader_variables_are_refused_where_a_root_wrapper_would_obey_them(shared_tmp):
    """The dynamic loader honours LD_PRELOAD and its kin for root: set on a switched task,
    the root exit wrapper (or setpriv) would load the framework's library as root. Such
    a task fails to launch with a message naming the variable; without them it runs."""

    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(shared_tmp, master.address)):
            planted = {"LD_PRELOAD": "/tmp/evil.so", "GCONV_PATH": "/tmp", "KEPT": "yes"}
            master.agent.run_task(_framework(), command_task("t", "id -un", environment=planted))
            final = await _final(master, "t")
            assert name(final.state) != "TASK_FINISHED", final
            assert "GCONV_PATH, LD_PRELOAD" in final.message and "root wrapper" in final.message, final
            master.agent.run_task(_framework(), command_task("ok", "id -un", environment={"KEPT": "yes"}))
            ok = await _final(master, "ok")
            assert (name(ok.state), ok.data) == ("TASK_FINISHED", b"nobody\n")
        await master.close()

    run(main())
