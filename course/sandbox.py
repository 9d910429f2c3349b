"""Who learner code runs as, under which limits, and cleaning up what it leaves behind.

`course grade` runs each stage's tests in a child process. This module decides how:

- **As root** (a CI container): the child runs as an unused, unprivileged user id (no
  entry in /etc/passwd, no files of its own), so it cannot write the grader's outputs, the
  harness, the virtual environment or the hidden tests (all owned by root, not writable by
  others); it can read the course (tests must import it). After every run, every process
  of that user id is killed, so nothing detached survives to rewrite a result later.
- **Not as root**: the child runs as the grader's own user. Everything below still holds
  except the file permissions; the grader says so (`Sandbox.note`) and the README's threat
  model explains what that leaves open.
- Always: resource limits (address space, file size, no core dumps, and a process count
  when the user id is the sandbox's own), a new session (process group) per
  child, killed as a whole after the run, and the grader registers as a *child subreaper*
  (Linux), so an orphan that double-forks out of the group is re-parented to the grader,
  which kills it too.

CPU time is bounded by the parent's wall-clock limit per test (it kills the process group),
not by RLIMIT_CPU: on Linux a process-wide CPU limit arms a CPU timer, and while one is
armed the kernel reports the process's CPU clock (`time.process_time`) at scheduler-tick
resolution (4 ms), which breaks the course's own CPU-time measurements (stage 08).
"""

from __future__ import annotations

import ctypes
import os
import pwd
import resource
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

UID_RANGE = range(61000, 62000)  # where the sandbox's user id is looked for
FILE_BYTES = 1 << 30  # 1 GiB: no single file may grow larger (a runaway log)
NPROC = 2048  # processes + threads of the sandbox user (torch starts a thread per core)
_PR_SET_CHILD_SUBREAPER = 36


def _default_memory() -> int:
    """Address-space limit for a test process: 3/4 of physical memory, at least 4 GiB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 16 << 30
    return max(4 << 30, total * 3 // 4)


def _uid_in_use(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        pass
    return any(_proc_uid(pid) == uid for pid in _pids())


def _pids() -> list[int]:
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def _proc_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _proc_ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _probe(uid: int) -> str:
    """Why user `uid` cannot run this interpreter and import the harness, or ''."""
    import subprocess
    import sys

    try:
        proc = subprocess.run([sys.executable, "-I", "-B", "-c", "import pytest, course.pytest_plugin"],
                              user=uid, group=uid, extra_groups=[], capture_output=True, text=True, timeout=120,
                              cwd="/", env={"PATH": os.environ.get("PATH", os.defpath), "HOME": "/"})
    except (OSError, subprocess.SubprocessError) as e:
        return f"{sys.executable}: {getattr(e, 'strerror', None) or e}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        return f"{sys.executable} -c 'import course': {last}"
    return ""


def set_subreaper() -> bool:
    """Become the reaper of orphaned descendants (Linux). False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@dataclass
class Sandbox:
    """How a grading child runs. `Sandbox.create()` picks the strongest the machine allows."""

    uid: int | None = None  # None: the grader's own user
    memory: int = field(default_factory=_default_memory)
    home: Path | None = None  # a private HOME / TMPDIR for the child
    note: str = ""  # what this sandbox does not do, said once to the instructor
    subreaper: bool = False
    _base: tempfile.TemporaryDirectory | None = None

    @classmethod
    def create(cls, unprivileged: bool = True) -> Sandbox:
        sb = cls()
        sb.subreaper = set_subreaper()
        if unprivileged and hasattr(os, "geteuid") and os.geteuid() == 0:
            uid = next((u for u in UID_RANGE if not _uid_in_use(u)), None)
            if uid is None:
                sb.note = "no free user id for the sandbox: learner code runs as root"
            else:
                why = _probe(uid)
                if why:
                    sb.note = f"the unprivileged user cannot run the course ({why}): learner code runs as root"
                else:
                    sb.uid = uid
        elif unprivileged:
            sb.note = ("not running as root: learner code runs as the grader's own user, so it could "
                       "write files the grader's user can (run the grader as root in CI; see the README)")
        sb._base = tempfile.TemporaryDirectory(prefix="course-sandbox-")
        sb.home = Path(sb._base.name) / "home"
        sb.home.mkdir()
        if sb.uid is not None:
            os.chmod(sb._base.name, 0o755)
            os.chown(sb.home, sb.uid, sb.uid)
            os.chmod(sb.home, 0o700)
        return sb

    def close(self) -> None:
        self.reap()
        if self._base is not None:
            try:
                self._base.cleanup()
            except OSError:
                pass
            self._base = None

    # -- starting a child -----------------------------------------------------------------
    def _limits(self) -> None:  # runs in the child between fork and exec
        def cap(which, value):
            try:
                soft, hard = resource.getrlimit(which)
                value = value if hard == resource.RLIM_INFINITY else min(value, hard)
                resource.setrlimit(which, (value, value))
            except (ValueError, OSError):
                pass

        cap(resource.RLIMIT_CORE, 0)
        cap(resource.RLIMIT_AS, self.memory)
        cap(resource.RLIMIT_FSIZE, FILE_BYTES)
        if self.uid is not None:
            cap(resource.RLIMIT_NPROC, NPROC)

    def popen_kwargs(self) -> dict:
        kw: dict = {"preexec_fn": self._limits, "start_new_session": True}
        if self.uid is not None:
            kw.update(user=self.uid, group=self.uid, extra_groups=[])
        return kw

    # -- cleaning up ----------------------------------------------------------------------
    def reap(self, group: int | None = None) -> int:
        """Kill what a child left behind: its process group, every process of the sandbox
        user, and orphans re-parented to this (subreaper) process. Returns how many."""
        killed = 0
        if group is not None:
            try:
                os.killpg(group, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        me = os.getpid()
        for _ in range(5):  # a fork bomb may add processes while we kill
            victims = [p for p in _pids() if p != me and _proc_state(p) not in ("Z", "X", "") and (
                (self.uid is not None and _proc_uid(p) == self.uid)
                or (self.subreaper and group is not None and _proc_ppid(p) == me and _pgid(p) != os.getpgid(0)))]
            if not victims:
                break
            for p in victims:
                try:
                    os.kill(p, signal.SIGKILL)
                    killed += 1
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.05)
        self._wait_orphans()
        return killed

    def _wait_orphans(self) -> None:
        """Collect the exit status of re-parented orphans (only ours: never other children)."""
        if not self.subreaper:
            return
        me = os.getpid()
        for p in _pids():
            if _proc_ppid(p) == me and _proc_state(p) == "Z":
                try:
                    os.waitpid(p, os.WNOHANG)
                except ChildProcessError:
                    pass


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _proc_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""
