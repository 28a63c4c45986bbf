"""Kill an embedded Ray cluster's processes when the rlrun driver dies, even by SIGKILL.

Ray's raylet and GCS share the driver's fate, but its dashboard and runtime-env agents notice the
raylet's death and then block for minutes reporting it to the (dead) GCS. This watchdog is a
child of the driver with PR_SET_PDEATHSIG=SIGTERM: the kernel signals it when the driver dies,
and it SIGKILLs the processes it was given. Each pid comes with its start time, so a pid reused
by an unrelated process after Ray's exit is never touched.

    python -m rlrun.launch.reaper PID:STARTTIME ...
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (clock ticks after boot): with the pid, names one process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(pids: list[int]) -> subprocess.Popen | None:
    """Start the watchdog for `pids` (Linux only; elsewhere there is no PDEATHSIG: returns None)."""
    if not sys.platform.startswith("linux"):
        return None
    args = [f"{p}:{started}" for p in pids if (started := start_time(p))]
    return subprocess.Popen([sys.executable, "-m", "rlrun.launch.reaper", str(os.getpid()), *args],
                            preexec_fn=_die_with_parent, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _reap(targets: list[tuple[int, str]]) -> None:
    for pid, started in targets:
        if start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def main(argv: list[str]) -> None:
    parent = int(argv[0])
    targets = [(int(p), s) for p, s in (a.split(":") for a in argv[1:])]
    signal.signal(signal.SIGTERM, lambda *_: (_reap(targets), os._exit(0)))
    signal.signal(signal.SIGUSR1, lambda *_: os._exit(0))  # the driver shut Ray down itself
    if os.getppid() != parent:  # the driver died before PDEATHSIG was armed
        _reap(targets)
        return
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1:])
