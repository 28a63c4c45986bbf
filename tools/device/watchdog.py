"""Run one command under a time limit that a hang cannot outlive, and leave its stacks behind.

    python3 tools/device/watchdog.py --limit 150 --log LOG [--name NAME] -- CMD ARG...

The command runs in its own session with stdout+stderr streamed to LOG (a hung child still leaves
everything it printed). At the limit every process of its tree (torchrun's ranks, Ray's raylet
and workers, the hf engine subprocesses) is asked for its Python stacks - `py-spy dump` where
py-spy is installed, else SIGABRT, which Python turns into a traceback of every thread because
this script sets PYTHONFAULTHANDLER=1 for the tree (Ray workers write it to their
/tmp/ray/session_latest/logs/worker-*.err) - then the tree is killed. Prints one line:
`STEP NAME rc=RC wall=Ss [TIMEOUT]` (rc 124 on timeout, as coreutils' timeout).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from rlrun.launch.reaper import descendants  # noqa: E402  (reads /proc; imports neither torch nor ray)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


def dump_stacks(pids: list[int], log) -> None:
    spy = shutil.which("py-spy")
    for pid in pids:
        cmd = cmdline(pid)
        if "python" not in cmd and "ray::" not in cmd:
            continue  # raylet, gcs_server, the router: no Python stack to show
        log.write(f"\n===== WATCHDOG stacks of pid {pid}: {cmd}\n")
        log.flush()
        if spy:
            r = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
            log.write(r.stdout + r.stderr)
            if r.returncode == 0:
                continue  # else (e.g. no ptrace permission in the container) fall back to faulthandler
        try:
            os.kill(pid, signal.SIGABRT)  # faulthandler writes to the process's own stderr
        except ProcessLookupError:
            pass
    log.flush()


def kill_tree(pids: list[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(3)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=float, required=True, help="seconds")
    p.add_argument("--log", required=True)
    p.add_argument("--name", default=None)
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("no command after --")
    name = args.name or Path(cmd[0]).name
    env = dict(os.environ, PYTHONFAULTHANDLER="1", PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    with open(args.log, "a") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=args.limit)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            tree = [proc.pid] + descendants(proc.pid)
            log.write(f"\n===== WATCHDOG: {name} passed its {args.limit:.0f}s limit; stacks follow\n")
            dump_stacks(tree, log)
            time.sleep(5)  # SIGABRT'd processes write their tracebacks
            kill_tree([proc.pid] + descendants(proc.pid) + tree)
            proc.wait()
            rc = 124
    wall = time.monotonic() - t0
    print(f"STEP {name} rc={rc} wall={wall:.0f}s" + (" TIMEOUT" if timed_out else ""), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
