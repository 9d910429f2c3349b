"""A warm worker for `course check`: a fork server with pytest, NumPy and torch imported.

A fresh `python -m pytest` spends seconds before its first test: importing pytest, NumPy,
Hypothesis and torch (about 2 s of CPU for torch alone), and, inside the first test that
needs them, torch's lazily imported parts (`torch.testing.assert_close` imports
`torch.distributed.tensor`, 1.4 s; an optimizer's first step `torch._dynamo`, 4 s). The
worker imports those once and forks one child per test process instead.

What does not change (`course.runner` decides every result, as with a plain child):
- The worker never imports the course, the solutions or any learner code, and runs no test:
  each request is a `fork()`, and the child (a new session: the runner kills its process
  group) runs `python -I -m pytest ARGS` exactly as a new interpreter would, in the
  request's directory and environment, with its stdin, stdout/stderr and event pipe passed
  over the socket. Learner code runs only in that child, never in the worker and never in
  the process that decides points; `course grade` does not use the worker at all.
- The worker only reports the child's pid, then its exit status and CPU time.

It is used when `COURSE_WORKER=1`, or when one is already running for this interpreter and
environment; `course check` from a terminal or a notebook starts one after its run (in the
background, where it imports for a few seconds), so the next check finds it warm.
`COURSE_WORKER=0` turns it off. It exits after `COURSE_WORKER_IDLE` seconds (default 900)
without a request. Its socket lives in a directory only this user can enter
(`COURSE_WORKER_DIR`, default `$TMPDIR/course-worker-UID`; at most 95 bytes of path with the
socket's name), named by a hash of the
interpreter, the installed packages' folder, this file and the environment (less COURSE_*),
so a worker started before a `pip install` or with other settings is never used.

Run as a script (`python -I course/worker.py SOCKET IDLE`) this file is the worker itself, and
imports only the standard library before its warm-up list.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time

# Imported by the worker before it listens (each optional: a missing one is skipped). Only
# third-party packages: never the course, the solutions or a stage's code.
PRELOAD = ("numpy", "pytest", "hypothesis", "torch", "torch.testing", "torch.distributed.tensor",
           "torch._dynamo", "torch.fx.experimental.symbolic_shapes", "transformers", "httpx", "fastapi",
           "openai", "datasketch")
IDLE_S = 900.0
START_S = 180.0  # a worker still warming up after this long is taken for dead
_MAX_REQUEST = 1 << 22
# not in the key: set per test or per shell command, or ignored under -I
_PER_RUN = ("PYTEST_CURRENT_TEST", "PYTHONDONTWRITEBYTECODE", "_", "PWD", "OLDPWD", "SHLVL")


# ---- the client (course.runner) -----------------------------------------------------------

def _dir() -> str:
    return os.environ.get("COURSE_WORKER_DIR") or os.path.join(tempfile.gettempdir(), f"course-worker-{os.getuid()}")


def _safe_dir(path: str) -> bool:
    """The socket's directory: ours, and nobody else's to enter (a socket there is trusted)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    import stat

    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _key(env: dict) -> str:
    """What the worker's imports depend on: the interpreter, the installed packages, this
    file and the environment (less the course's own per-run settings)."""
    parts = [sys.executable, sys.version]
    for p in (sysconfig.get_paths()["purelib"], __file__):
        try:
            st = os.stat(p)
            parts.append(f"{p}:{st.st_mtime_ns}:{st.st_size}")
        except OSError:
            parts.append(p)
    parts += sorted(f"{k}={v}" for k, v in env.items() if not k.startswith("COURSE_") and k not in _PER_RUN)
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:20]


def mode() -> str:
    """'off', 'on' (use it, start one if none), or 'auto' (use one if running)."""
    v = os.environ.get("COURSE_WORKER", "").strip().lower()
    return "off" if v in ("0", "off", "no", "false") else "on" if v in ("1", "on", "yes", "true") else "auto"


# A Unix socket's path has at most 107 bytes (sun_path); the worker binds a name 11 bytes
# longer first. A directory too deep for that (a long COURSE_WORKER_DIR) means no worker.
_MAX_PATH = 107 - len(".4194304.tmp")


def socket_path(env: dict) -> str:
    return os.path.join(_dir(), f"w-{_key(env)}.sock")


def _usable(path: str) -> bool:
    """A socket path a worker can listen on, in a directory only this user can enter."""
    return len(os.fsencode(path)) <= _MAX_PATH and _safe_dir(os.path.dirname(path))


def _account(cpu: float) -> None:
    """A worker child's CPU seconds, appended to $COURSE_WORKER_STATS when set (the child is
    not the caller's, so getrusage(RUSAGE_CHILDREN) misses it: tests/check_times.py adds these)."""
    out = os.environ.get("COURSE_WORKER_STATS")
    if out:
        try:
            with open(out, "a", encoding="utf-8") as f:
                f.write(f"{cpu}\n")
        except OSError:
            pass


class WorkerChild:
    """A test process forked by the worker, for `course.runner`: `pid` (its process group),
    `poll()`, `wait(timeout)`, `kill()`, like subprocess.Popen's; `cpu` once it has ended."""

    def __init__(self, conn: socket.socket, pid: int):
        self.conn, self.pid = conn, pid
        self.returncode: int | None = None
        self.cpu: float | None = None  # user + system seconds of the child and what it waited for
        self._buf = b""

    def _read(self, timeout: float | None) -> None:
        end = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if end is None else max(0.0, end - time.monotonic())
            ready, _, _ = select.select([self.conn], [], [], left)
            if not ready:
                return
            chunk = self.conn.recv(4096)
            if not chunk:  # the worker died: the child's status is lost, but it is gone too
                self.returncode = -signal.SIGKILL
                return
            self._buf += chunk
            if b"\n" in self._buf:
                msg = json.loads(self._buf.split(b"\n", 1)[0])
                self.returncode = int(msg["rc"])
                self.cpu = float(msg.get("cpu", 0.0))
                self.conn.close()
                _account(self.cpu)

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._read(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired("course worker child", timeout or 0)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def spawn(argv: list[str], *, cwd, env: dict, stdout: int, pass_fd: int, bytecode: bool) -> WorkerChild | None:
    """Run `python -I [-B] -m pytest argv[...]` as a child of a warm worker, or None when none
    is running for this interpreter and `env` (the caller then starts a plain process).
    `argv` is pytest's arguments; `pass_fd` keeps its number in the child."""
    path = socket_path(env)
    if mode() == "off" or not os.path.exists(path) or not _usable(path):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(10)
        conn.connect(path)
        body = json.dumps({"argv": argv, "cwd": str(cwd), "env": env, "fd": pass_fd, "bytecode": bytecode}).encode()
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            socket.send_fds(conn, [struct.pack("!I", len(body)) + body], [null, stdout, pass_fd])
        finally:
            os.close(null)
        buf = b""
        while b"\n" not in buf:
            chunk = conn.recv(4096)
            if not chunk:
                raise OSError("the worker closed the connection")
            buf += chunk
        line, rest = buf.split(b"\n", 1)
        pid = int(json.loads(line)["pid"])
        conn.settimeout(None)
    except ConnectionRefusedError:  # a worker that died without removing its socket
        conn.close()
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    except (OSError, ValueError, KeyError, TypeError):
        conn.close()
        return None
    child = WorkerChild(conn, pid)
    child._buf = rest
    return child


def _listening(path: str) -> bool:
    """Whether a worker accepts connections on the socket file `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(2)
        try:
            c.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:
            return True  # busy or slow (a timeout): taken as running, never replaced under it
    return True


def ensure_started(env: dict, *, interactive: bool = False) -> subprocess.Popen | None:
    """Start a worker for `env` in the background unless one runs or is starting (or the
    worker is off, or `auto` and not `interactive`). Returns at once, with the worker's
    process if it started one."""
    m = mode()
    if m == "off" or (m == "auto" and (not interactive or "PYTEST_VERSION" in os.environ)):
        return None  # (never on its own inside a pytest session: the maintainers' suite, nbval's kernels)
    path = socket_path(env)
    if not _usable(path):
        return None  # (a path too long to bind: no worker, every check starts a plain process)
    if os.path.exists(path):
        if _listening(path):
            return None
        try:  # a worker that died without removing its socket (SIGKILL, a crash): start anew
            os.unlink(path)
        except OSError:
            return None
    lock = path + ".starting"
    try:
        if time.time() - os.stat(lock).st_mtime < START_S:
            return None  # one is warming up
        os.unlink(lock)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError:
        return None
    server_env = {k: v for k, v in env.items() if not k.startswith("COURSE_")}
    idle = os.environ.get("COURSE_WORKER_IDLE", str(IDLE_S))
    try:
        return subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), path, idle], env=server_env,
                                cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError:
        os.unlink(lock)
        return None


def stop(env: dict) -> None:
    """Ask the worker for `env` to exit (tests)."""
    path = socket_path(env)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(10)
            c.connect(path)
            body = b'{"stop": true}'
            c.sendall(struct.pack("!I", len(body)) + body)
            c.recv(16)
    except OSError:
        pass


# ---- the worker ---------------------------------------------------------------------------

def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    conn.settimeout(10)
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    try:
        while len(data) < 4 or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
            if len(data) > _MAX_REQUEST:
                raise ValueError("request too large")
            chunk = conn.recv(1 << 16)
            if not chunk:
                raise ValueError("short request")
            data += chunk
        n = struct.unpack("!I", data[:4])[0]
        return json.loads(data[4:4 + n]), fds
    except Exception:
        for fd in fds:
            os.close(fd)
        raise


def _terminated(*_) -> None:
    raise SystemExit(0)


def _serve(path: str, idle: float):
    """Accept requests until idle; in a forked child, return (request, fds, closers)."""
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}.tmp"
    lsock.bind(tmp)
    lsock.listen(16)
    os.rename(tmp, path)  # clients see the socket only once the imports are done
    # the file's own inode, to remove it on the way out only if it is still ours (a socket's
    # fstat gives the socket's inode in sockfs, never the file's: comparing with that left
    # every worker's file behind, which ensure_started then took for a running worker)
    own = os.stat(path).st_ino
    try:
        os.unlink(path + ".starting")
    except OSError:
        pass
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, _terminated)  # remove the socket on the way out
    signal.set_wakeup_fd(wake_w)
    children: dict[int, socket.socket] = {}  # pid -> the connection that asked for it
    last = time.monotonic()
    try:
        while True:
            while children:  # reap: each child's status and CPU time to its client
                try:
                    pid, status, ru = os.wait4(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                conn = children.pop(pid, None)
                if conn is not None:
                    msg = {"rc": os.waitstatus_to_exitcode(status), "cpu": round(ru.ru_utime + ru.ru_stime, 3)}
                    try:
                        conn.sendall(json.dumps(msg).encode() + b"\n")
                    except OSError:
                        pass
                    conn.close()
                last = time.monotonic()
            if not children and time.monotonic() - last > idle:
                return None
            ready, _, _ = select.select([lsock, wake_r, *children.values()], [], [], 5.0)
            if wake_r in ready:
                try:
                    os.read(wake_r, 512)
                except BlockingIOError:
                    pass
            for pid, conn in list(children.items()):  # a client gone: its child goes too
                if conn in ready:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            if lsock not in ready:
                continue
            try:
                conn, _ = lsock.accept()
                req, fds = _recv_request(conn)
            except (OSError, ValueError):
                continue
            last = time.monotonic()
            if req.get("stop"):
                conn.close()
                return None
            if len(fds) != 3 or not isinstance(req.get("argv"), list) or not isinstance(req.get("env"), dict):
                for fd in fds:
                    os.close(fd)
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                return req, fds, [lsock, conn, wake_r, wake_w, *children.values()]
            for fd in fds:
                os.close(fd)
            conn.settimeout(None)
            try:
                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            except OSError:  # the client is gone already: so is the reason to run
                os.kill(pid, signal.SIGKILL)
            children[pid] = conn
    finally:
        if os.getpid() == _SERVER_PID:
            try:
                if os.stat(path).st_ino == own:
                    os.unlink(path)
            except OSError:
                pass


def _become_pytest(req: dict, fds: list[int], closers: list) -> None:
    """In the forked child: what `python -I [-B] -m pytest ARGV` would be, then run it."""
    os.setsid()  # its own process group, as the runner's Popen(start_new_session=True)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for c in closers:
        try:
            c.close() if hasattr(c, "close") else os.close(c)
        except OSError:
            pass
    null, out, ev = fds
    target = int(req["fd"])
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    if ev != target:
        os.dup2(ev, target, inheritable=True)
    for fd in {null, out, ev} - {0, 1, 2, target}:
        os.close(fd)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in req["env"].items()})
    sys.dont_write_bytecode = not req.get("bytecode", False)
    if "numpy.random" in sys.modules:  # a new interpreter seeds NumPy's global generator afresh
        sys.modules["numpy.random"].seed()
    import runpy
    import types

    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    sys.argv = ["-m", *map(str, req["argv"])]
    code: object = 0
    try:
        runpy._run_module_as_main("pytest")
    except SystemExit as e:  # pytest's exit status
        code = e.code
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback, status 1
        import traceback

        traceback.print_exc()
        code = 1
    _exit(code)


def _exit(code: object) -> None:
    """End the child as the interpreter's own exit would, less tearing down every module the
    worker imported (seconds of touching torch's objects, which fork shares): non-daemon
    threads joined, atexit handlers run, stdio flushed (as multiprocessing's fork children)."""
    import atexit
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:  # noqa: BLE001
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    status = 0 if code is None else code if isinstance(code, int) else 1
    if not isinstance(code, int) and code is not None:
        print(code, file=sys.stderr)
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:  # noqa: BLE001
            status = status or 120  # as Python does when it cannot flush stdout
    os._exit(status & 0xFF if status >= 0 else 1)


_SERVER_PID = 0


def _main(path: str, idle: float) -> None:
    global _SERVER_PID
    _SERVER_PID = os.getpid()
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing or broken package is simply not warm
            pass
    import gc

    gc.collect()
    gc.freeze()  # the warm objects out of every collection: a child's GC never touches them
    got = _serve(path, idle)
    if got is None:
        return
    _become_pytest(*got)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        _main(sys.argv[1], float(sys.argv[2]))
