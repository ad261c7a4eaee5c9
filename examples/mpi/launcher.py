"""MPICH's ``mpiexec`` with its manual launcher: the job's side beside the scheduler.

``mpiexec -launcher manual`` does not start its Hydra proxies itself: it prints the
command of each (``HYDRA_LAUNCH: ...``, then ``HYDRA_LAUNCH_END``) and waits for them to
dial its control port. The framework runs each command as a mezzo task. Every rank
gets a host entry of its own (``rank0:1,rank1:1,...``: names only, the manual launcher
resolves none), so proxy *i* runs rank *i* alone: a rank per task, as the scheduler
placed them. ``-localhost`` is the address the proxies dial, which must be this
machine's as the agents reach it.

Once the proxies are running, everything the ranks print comes out of mpiexec, and is
copied to ``output`` line by line; mpiexec exits when the job ends, with the job's status.

A rank that fails. Under the manual launcher a proxy whose rank exits non-zero still
exits 0, and mpiexec waits on for it: the other ranks would wait forever in their next
collective call. So every rank runs under :data:`RANK_WRAPPER`, which SIGKILLs the
rank's proxy when the rank fails: its task then ends ``TASK_FAILED`` (the scheduler
fails the job and kills the other ranks), and Hydra tears the job down (the other
proxies lose their peer and exit, mpiexec exits non-zero).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import TextIO

RANK_WRAPPER = '"$@"; status=$?; [ "$status" -eq 0 ] || { sleep 0.5; kill -KILL "$PPID"; }; exit "$status"'
"""``/bin/sh -c RANK_WRAPPER mpi-rank PROGRAM ARGS...``: runs the rank, and kills its
proxy (the shell's parent) if it fails; see the module docstring. The half second first
lets the proxy forward what the rank wrote last, most often why it failed: killed at
once, it lost those lines now and then."""
LAUNCH_PREFIX = "HYDRA_LAUNCH: "
LAUNCH_END = "HYDRA_LAUNCH_END"


class LaunchError(Exception):
    """mpiexec could not be started, or did not print its proxies' commands."""


class MpiexecLauncher:
    """One job's ``mpiexec``; see the module docstring."""

    def __init__(
        self,
        program: Sequence[str],
        ranks: int,
        localhost: str,
        *,
        mpiexec: str = "mpiexec",
        output: TextIO | None = None,
        cwd: str | None = None,
    ) -> None:
        self.argv = [
            mpiexec,
            "-launcher",
            "manual",
            "-localhost",
            localhost,
            "-hosts",
            ",".join(f"rank{i}:1" for i in range(ranks)),
            "-n",
            str(ranks),
            "/bin/sh",
            "-c",
            RANK_WRAPPER,
            "mpi-rank",
            *program,
        ]
        self.ranks = ranks
        self.output = output if output is not None else sys.stdout
        self.cwd = cwd
        self.process: subprocess.Popen[str] | None = None
        # Bounded: a reader that gets ahead of the copy blocks, and mpiexec with it.
        self._lines: queue.Queue[str | None] = queue.Queue(maxsize=10_000)
        self._copier: threading.Thread | None = None

    def start(self, timeout: float = 10.0) -> list[str]:
        """Start mpiexec; the shell command of each rank's proxy, rank 0 first, once it
        has printed them all. :class:`LaunchError` (mpiexec stopped) if it cannot be
        started, exits first, or takes longer than ``timeout`` seconds."""
        try:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=self.cwd,
                start_new_session=True,  # so that stop() reaches what it started too
            )
        except OSError as exc:
            raise LaunchError(f"cannot start {self.argv[0]}: {exc.strerror or exc}") from None
        threading.Thread(target=self._read, name="mpiexec-output", daemon=True).start()
        commands: list[str] = []
        said: list[str] = []
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                self.stop()
                raise LaunchError(f"mpiexec printed no proxy commands within {timeout:g} s") from None
            if line is None:
                self.process.wait()
                raise LaunchError(
                    f"mpiexec exited with status {self.process.returncode} before launching: "
                    + (" | ".join(said[-5:]) or "no output")
                )
            if line.startswith(LAUNCH_PREFIX):
                commands.append(line[len(LAUNCH_PREFIX) :].strip())
            elif line.strip() == LAUNCH_END:
                break
            else:
                said.append(line.rstrip())
        if len(commands) != self.ranks:
            self.stop()
            raise LaunchError(f"mpiexec printed {len(commands)} proxy commands for {self.ranks} ranks")
        self._copier = threading.Thread(target=self._copy, name="mpiexec-copy", daemon=True)
        self._copier.start()
        return commands

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _copy(self) -> None:
        """After the launch: the ranks' output, as it comes."""
        while (line := self._lines.get()) is not None:
            self.output.write(line)
            self.output.flush()

    def wait(self, timeout: float | None = None) -> int | None:
        """mpiexec's exit status (None if it still runs after ``timeout``), once all it
        printed has been copied to ``output``."""
        if self.process is None:
            return None
        try:
            status = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if self._copier is not None:
            self._copier.join(5.0)  # the pipe's rest: the job's last lines (its result)
        return status

    def stop(self, grace: float = 3.0) -> None:
        """SIGTERM mpiexec's process group, SIGKILL after ``grace`` seconds."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(grace)
                return
            except subprocess.TimeoutExpired:
                continue
