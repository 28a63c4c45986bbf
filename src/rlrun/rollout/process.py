"""A child server process (a router, an engine) that never outlives rlrun.

- own process group (start_new_session) so that stop() kills the server and its children;
- PR_SET_PDEATHSIG=SIGKILL (Linux) so that a SIGKILLed parent still takes the server down
  (it fires when the *thread* that started the child ends: start servers from long-lived
  threads, e.g. the main thread, a Ray actor's executor, EngineGroup's monitor);
- atexit + stop() for the normal and the SIGTERM/SIGINT paths (the runner turns signals into
  SystemExit, which runs atexit);
- stdout+stderr to a log file whose tail goes into every startup error.
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import os
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import requests

_LIVE: set["ServerProcess"] = set()
PORT_TAKEN = "Address already in use"  # what a server that lost a free_port() race to another process logs


# Ports free_port() handed out on this machine, shared by its processes: engines started at once (each Ray actor
# picks its server's ports on its node) bind them only after their imports and model load, a minute later, and the
# kernel may give the same free port to two binds meanwhile. A port handed out is not handed out again for LEASE_S.
PORT_LEASES = Path(tempfile.gettempdir()) / f"rlrun-port-leases-{os.getuid()}.json"
LEASE_S = 3600.0  # longer than an engine's start (rollout.engine_start_timeout_s, 1800 s by default)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on host now and not handed out by free_port to any process of this machine in the last LEASE_S."""
    with _leases() as leased:
        for _ in range(64):
            port = _bind_free(host)
            if str(port) not in leased:
                break
        leased[str(port)] = time.time()  # after 64 leased ones in a row (not seen): the kernel's pick
        return port


def _bind_free(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextmanager
def _leases():
    """The live leases {port: time handed out}, under an exclusive lock of the file; written back on exit."""
    import fcntl
    import json

    with open(PORT_LEASES, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.seek(0)
            try:
                leased = json.loads(f.read() or "{}")
            except ValueError:  # a torn or foreign file: start again
                leased = {}
            now = time.time()
            leased = {p: t for p, t in leased.items() if isinstance(t, (int, float)) and now - t < LEASE_S}
            yield leased
            f.seek(0)
            f.truncate()
            f.write(json.dumps(leased))
            f.flush()  # before the lock goes: the next holder reads the file, not this process's buffer
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def free_port_range(n: int, host: str = "127.0.0.1", tries: int = 50) -> int:
    """The first of n consecutive ports that are all free on host now and none leased (a server that derives its
    other ports from one base, as SGLang does from --dist-init-addr, needs them all); all n leased. Raises after
    `tries` bases."""
    with _leases() as leased:
        for _ in range(tries):
            base = _bind_free(host)
            if base + n > 65535 or any(str(p) in leased for p in range(base, base + n)):
                continue
            socks = []
            try:
                for port in range(base, base + n):
                    s = socket.socket()
                    socks.append(s)
                    s.bind((host, port))
            except OSError:
                continue
            finally:
                for s in socks:
                    s.close()
            now = time.time()
            leased.update({str(p): now for p in range(base, base + n)})
            return base
    raise RuntimeError(f"no {n} consecutive free ports on {host} after {tries} tries")


def _die_with_parent(parent: int) -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except OSError:
        return  # not Linux: atexit and stop() still apply
    if os.getppid() != parent:  # the parent died between the fork and the line above: the signal will never come
        os._exit(1)


def log_tail(path: str | Path, lines: int = 40) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log written)"
    return "\n".join(text[-lines:])


class ServerProcess:
    def __init__(self, name: str, argv: list[str], log_path: str | Path, env: dict | None = None):
        self.name, self.argv, self.log_path = name, argv, Path(log_path)
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> "ServerProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.log_start = log.tell()  # a restart appends: what this process wrote begins here
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=self.env, start_new_session=True,
                                     preexec_fn=functools.partial(_die_with_parent, os.getpid()))
        log.close()
        _LIVE.add(self)
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def _exited(self) -> bool:
        """Has the server exited? Never reaps it: while the leader is an unreaped zombie its pid,
        hence our process-group id, cannot be reused, so signalling the group stays safe."""
        if self.proc.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def alive(self) -> bool:
        return self.proc is not None and not self._exited()

    def wait_line(self, prefix: str, timeout_s: float) -> str:
        """The rest of the first line this process logged that starts with prefix (e.g. 'READY ' and
        the url of a server that bound port 0); raises with the log tail if it dies or time runs out."""
        deadline = time.monotonic() + timeout_s
        while True:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_start)
                for line in f.read().decode(errors="replace").splitlines():
                    if line.startswith(prefix):
                        return line[len(prefix):].strip()
            if not self.alive() or time.monotonic() > deadline:
                what = f"exited with code {self.proc.wait()}" if not self.alive() else f"printed none in {timeout_s:.0f}s"
                self.stop()
                raise RuntimeError(f"{self.name} {what} before a {prefix.strip()!r} line. Command: {' '.join(self.argv)}"
                                   f"\n--- last lines of {self.log_path} ---\n{log_tail(self.log_path)}")
            time.sleep(0.05)

    def wait_healthy(self, url: str, timeout_s: float, interval_s: float = 0.2) -> None:
        """Polls url until 200; raises with the log tail if the process dies or time runs out."""
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.proc.wait()
                raise RuntimeError(f"{self.name} exited with code {code} before {url} was "
                                   f"healthy. Command: {' '.join(self.argv)}\n--- last lines of "
                                   f"{self.log_path} ---\n{log_tail(self.log_path)}")
            try:
                r = requests.get(url, timeout=min(5.0, max(0.5, deadline - time.monotonic())))
                if r.status_code == 200:
                    return
                last = f"HTTP {r.status_code}"
            except requests.RequestException as exc:
                last = type(exc).__name__
            time.sleep(interval_s)
        self.stop()
        raise TimeoutError(f"{self.name} not healthy at {url} after {timeout_s:.0f}s (last: {last}); "
                           f"raise its start timeout (rollout.engine_start_timeout_s for a run's engines) if the model "
                           f"is large or still loading.\n--- last lines of {self.log_path} ---\n"
                           f"{log_tail(self.log_path)}")

    def _signal_group(self, sig: int) -> None:
        if self.proc.returncode is None:  # not reaped: the group id is still ours
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signals the whole process group (fault-injection tests; stop())."""
        if self.proc is not None:
            self._signal_group(sig)

    def _wait_exit(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self._exited():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def stop(self, grace_s: float = 5.0) -> None:
        if self.proc is None:
            return
        self._signal_group(signal.SIGTERM)
        if not self._wait_exit(grace_s):
            self._signal_group(signal.SIGKILL)
            self._wait_exit(grace_s)
        self._signal_group(signal.SIGKILL)  # children left in the group (e.g. SGLang's schedulers)
        try:
            self.proc.wait(timeout=grace_s)  # reap last
        except subprocess.TimeoutExpired:
            pass
        _LIVE.discard(self)


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop(grace_s=2.0)
