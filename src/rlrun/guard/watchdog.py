"""Stall diagnosis: a watchdog that knows the phase each part of the run is in (docs/observability.md).

Every phase the loops time (rlrun.metrics.Timer: rollout, log_probs, train, weight_sync, save,
eval, ...) and the rollout side's generation are entered on BOARD, which keeps what runs now and
how long each phase took before (a resumed run starts from the time/<phase>_s of its
metrics.jsonl). A phase running longer than its bound,

    max(checks.watchdog.floor_s, checks.watchdog.factor x the median of its earlier durations)
    (checks.watchdog.first_s while it has no history),

is a stall. The watchdog then collects the Python stacks of the driver's threads and of every
Ray worker and engine process on this node (py-spy where it is installed and allowed, else each
process's title, which Ray sets to the actor method it runs), the engines' health and queue
(/health_generate, /get_load), the router's workers and the last metrics row, names the likely
cause and writes RUN_DIR/diagnosis.json and RUN_DIR/diagnosis.txt. checks.watchdog.on_stall=stop
then interrupts the driver (SIGUSR1 -> StallError in the main thread: the run tears down and exits
non-zero); wait leaves it waiting (one diagnosis per stalled phase).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

DIAGNOSIS_JSON, DIAGNOSIS_TXT = "diagnosis.json", "diagnosis.txt"
PROBE_TIMEOUT_S = 5.0   # an engine or router that does not answer a probe within this is "not answering"
STACK_TIMEOUT_S = 20.0  # py-spy dump of one process
UNBLOCK_AFTER_S = 10.0  # on_stall=stop: a driver still in the stalled phase by then has its trainer ranks ended
EXIT_GRACE_S = 120.0    # on_stall=stop: a driver that has not left the run by then is ended (os._exit)
COLLECTIVES = ("all_reduce", "allreduce", "broadcast", "all_gather", "allgather", "reduce_scatter", "barrier")
ENGINE_PHASES = ("rollout", "rollout_wait", "eval", "generate", "weight_sync")
TRAINER_PHASES = ("train", "log_probs", "save", "offload")


class StallError(RuntimeError):
    """Raised in the driver's main thread when the watchdog stops a stalled run."""


from rlrun.metrics import BOARD, Active, PhaseBoard  # noqa: E402,F401 - the board Timer feeds; public here too


def bound_s(w, history: list[float]) -> float:
    """The longest a phase may run: w is checks.watchdog."""
    return max(w.floor_s, w.factor * statistics.median(history)) if history else w.first_s


# ---- what the diagnosis collects ---------------------------------------------------------------------------

def _get(url: str, timeout: float = PROBE_TIMEOUT_S) -> dict:
    import requests

    t0 = time.monotonic()
    try:
        r = requests.get(url, timeout=timeout)
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text[:300]
        return {"ok": r.status_code == 200, "status": r.status_code, "body": body,
                "seconds": round(time.monotonic() - t0, 3)}
    except Exception as e:  # noqa: BLE001 - a probe reports, never raises
        return {"ok": False, "error": f"{type(e).__name__}: {str(e)[:200]}", "seconds": round(time.monotonic() - t0, 3)}


def engine_state(engines) -> list[dict]:
    """Per engine: process alive, /health_generate (a one-token generation), /get_load (queue);
    the engines are probed at once."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i, e) -> dict:
        url = getattr(e, "url", None)
        row = {"engine": i, "url": url}
        try:
            row["alive"] = bool(e.alive())
        except Exception as exc:  # noqa: BLE001
            row["alive"], row["alive_error"] = False, str(exc)[:200]
        if url and row["alive"]:
            row["health_generate"] = _get(f"{url}/health_generate")
            row["load"] = _get(f"{url}/get_load")
        return row

    items = list(enumerate(list(getattr(engines, "engines", []))))
    with ThreadPoolExecutor(max_workers=max(1, len(items))) as pool:
        return list(pool.map(lambda ie: one(*ie), items))


def thread_stacks() -> dict[str, str]:
    """The driver's threads, by name."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return {f"{names.get(ident, 'thread')} ({ident})": "".join(traceback.format_stack(frame))
            for ident, frame in sys._current_frames().items()}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return ""


def run_processes() -> dict[int, str]:
    """The run's Python processes on this node: the driver's descendants (an embedded Ray's raylet
    and workers, engine subprocesses), by pid -> command line (Ray's workers: ray::Class.method)."""
    from rlrun.launch.reaper import descendants

    procs = {pid: _cmdline(pid) for pid in descendants(os.getpid())}
    return {pid: c for pid, c in procs.items() if c.startswith("ray::") or Path(c.split(" ")[0]).name.startswith("python")}


def process_state(pid: int) -> str:
    """/proc/PID/stat's state letter: R running, S sleeping, D disk wait, T stopped, Z zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def process_stacks(pids: dict[int, str]) -> dict[str, dict]:
    """py-spy dump of each process (where installed and allowed; all at once, so the whole takes at
    most STACK_TIMEOUT_S), else its title only. A stopped process (state T) is not dumped: ptrace
    would wait for it."""
    from concurrent.futures import ThreadPoolExecutor

    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))

    def one(pid: int, cmd: str) -> dict:
        row = {"cmd": cmd, "state": process_state(pid)}
        if row["state"] in ("T", "t", "Z"):
            row["py_spy_error"] = "not dumped: the process is stopped" if row["state"] != "Z" else "a zombie"
        elif not spy:
            row["py_spy_error"] = "py-spy is not installed (pip install rlrun[dev]): titles only"
        else:
            try:
                r = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                                   timeout=STACK_TIMEOUT_S)
                row["stack" if r.returncode == 0 else "py_spy_error"] = (r.stdout if r.returncode == 0 else r.stderr)[-6000:]
            except (subprocess.TimeoutExpired, OSError) as e:
                row["py_spy_error"] = str(e)[:200]
        return row

    with ThreadPoolExecutor(max_workers=max(1, len(pids))) as pool:
        rows = list(pool.map(lambda kv: one(*kv), pids.items()))
    return {str(pid): row for pid, row in zip(pids, rows)}


def last_metrics(run_dir: Path) -> dict | None:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return None
    lines = path.read_text().strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None


# ---- the likely cause ---------------------------------------------------------------------------------------

def _in_collective(stack: str) -> str | None:
    """The collective a py-spy stack waits in (its innermost frame naming one), or None."""
    for line in stack.splitlines():
        s = line.strip()
        for name in COLLECTIVES:
            if s.startswith(name + " ") or f" {name} (" in s or f".{name} (" in s:
                return name
    return None


def likely_cause(stalled: Active, engines: list[dict], procs: dict[str, dict], driver: dict[str, str]) -> dict:
    """{kind, text}: engine_not_answering | weight_push | rank_in_collective | trainer | data_source | unknown."""
    bad = [e for e in engines if not e.get("alive") or not e.get("health_generate", {}).get("ok")]
    ph = stalled.phase
    if bad and (ph in ENGINE_PHASES or stalled.part == "rollout"):
        desc = "; ".join(f"engine {e['engine']} ({e['url']}) " + (
            "process gone" if not e.get("alive") else
            f"/health_generate {e['health_generate'].get('error') or 'HTTP ' + str(e['health_generate'].get('status'))}")
            for e in bad)
        return {"kind": "engine_not_answering", "text": f"an engine is not answering: {desc}"}
    if ph == "weight_sync":
        return {"kind": "weight_push", "text": "waiting on a weight push (trainer -> engines): the engines answer, "
                "so look at the trainer's lead rank and the engines' stacks in the push"}
    if ph in TRAINER_PHASES:
        waiting = {pid: c for pid, p in procs.items() if (c := _in_collective(p.get("stack", "")))}
        ranks = {pid: p for pid, p in procs.items() if "_Rank" in p["cmd"]}
        stopped = [pid for pid, p in ranks.items() if p.get("state") in ("T", "t")]
        if stopped and waiting:
            where = "; ".join(f"pid {pid} in {c}" for pid, c in waiting.items())
            return {"kind": "rank_in_collective", "text": f"trainer process(es) {stopped} are stopped (SIGSTOP, a "
                    f"debugger) while their peers wait in a collective ({where})"}
        if waiting:
            others = [pid for pid in ranks if pid not in waiting]
            where = "; ".join(f"pid {pid} in {c}" for pid, c in waiting.items())
            rest = f"; not in it: trainer process(es) {others}" if others else ""
            return {"kind": "rank_in_collective", "text": f"a trainer rank waits in a collective its peers never "
                    f"joined ({where}{rest})"}
        return {"kind": "trainer", "text": f"the trainer's {ph} phase does not end (no stacks show a collective: "
                f"see the trainer ranks' stacks)"}
    if ph in ENGINE_PHASES or stalled.part == "rollout":
        queued = sum(int(r.get("num_reqs", 0)) + int(r.get("num_waiting_reqs", 0))
                     for e in engines for r in (e.get("load", {}).get("body") or [])
                     if isinstance(r, dict))
        if not queued:
            frame = _innermost_rlrun_frame(driver, stalled.thread)
            return {"kind": "data_source", "text": f"the engines are idle and answer, so the rollout waits on its "
                    f"own side: a data source, generate function or reward ({frame})"}
        return {"kind": "engines_busy", "text": f"{queued} requests are still running or queued on healthy engines "
                f"(generation slower than its history; raise checks.watchdog.factor if that is expected)"}
    return {"kind": "unknown", "text": f"phase {ph} of {stalled.part} ran past its bound"}


def _innermost_rlrun_frame(driver: dict[str, str], thread: str) -> str:
    """The innermost frame of the stalled thread outside the standard library (where it waits)."""
    stack = next((s for name, s in driver.items() if name.startswith(thread + " (")), "")
    frames = [ln.strip() for ln in stack.splitlines() if ln.strip().startswith("File ")]
    skip = ("/threading.py", "/contextlib.py", "/rlrun/guard/", "/selectors.py", "/socket.py", "/concurrent/")
    mine = [f for f in frames if not any(s in f for s in skip)]
    return mine[-1] if mine else "no frame"


# ---- the watchdog -------------------------------------------------------------------------------------------

class Watchdog:
    """The part the runner starts around the loop (a context manager). parts: rlrun.parts.Parts
    (its rollout.engines and rollout.router are probed); board: BOARD."""

    def __init__(self, cfg, run_dir: Path, parts=None, board: PhaseBoard = BOARD, out=sys.stderr):
        self.w, self.run_dir, self.parts, self.board, self.out = cfg.checks.watchdog, Path(run_dir), parts, board, out
        self.done = threading.Event()
        self.diagnosed: set = set()
        self.diagnosis: dict | None = None
        self.stopping = False  # the watchdog is stopping the run (a stall with on_stall=stop, or fail())
        self.thread = threading.Thread(target=self._watch, name="rlrun-watchdog", daemon=True)
        self._previous = None

    def __enter__(self) -> "Watchdog":
        self.board.reset()
        self._seed_history()
        if threading.current_thread() is threading.main_thread():  # stalls (on_stall=stop) and fail()
            self._previous = signal.signal(signal.SIGUSR1, self._handler)
        if self.w.on_stall != "off":
            self.thread.start()
        return self

    def __exit__(self, typ, value, tb) -> None:
        self.done.set()  # the driver has left the run (the stop thread's grace ends)
        if self.thread.is_alive():
            self.thread.join(timeout=self.w.poll_s + 60)
        if self._previous is not None:
            signal.signal(signal.SIGUSR1, signal.SIG_IGN if self.thread.is_alive() else self._previous)
        if value is not None and self.stopping and not isinstance(value, StallError):
            # the signal's StallError may surface wrapped (raised inside a C call: SystemError) or
            # as the error the interrupted wait turned into: the stall is the cause
            raise StallError(self.diagnosis["summary"]) from value

    def _handler(self, signum, frame):
        if self.done.is_set() or not self.stopping:
            return
        raise StallError(self.diagnosis["summary"])

    def _seed_history(self) -> None:
        """A resumed run's earlier phase durations (metrics.jsonl time/<phase>_s) bound its phases."""
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return
        hist: dict[str, list[float]] = {}
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            for k, v in row.items():
                if k.startswith("time/") and k.endswith("_s") and k != "time/step_s" and isinstance(v, (int, float)):
                    hist.setdefault(k[5:-2], []).append(float(v))
        for phase, secs in hist.items():
            self.board.seed("driver", phase, secs)

    def _watch(self) -> None:
        while not self.done.wait(self.w.poll_s):
            active, history = self.board.snapshot()
            now = time.monotonic()
            for a in active:
                limit = bound_s(self.w, history.get((a.part, a.phase), []))
                key = (a.part, a.phase, a.since)
                if now - a.since > limit and key not in self.diagnosed:
                    self.diagnosed.add(key)
                    self.diagnose(a, now - a.since, limit, history.get((a.part, a.phase), []))
                    if self.w.on_stall == "stop":
                        self._stop_run()
                        return

    def fail(self, text: str, kind: str = "engine_restarts_exhausted") -> None:
        """Stop the run for a cause another part found (EngineGroup.on_fatal: an engine that keeps
        failing), with the same diagnosis; any thread. The message names the last checkpoint."""
        from rlrun import checkpoint as ckpt

        try:
            last = ckpt.find_latest(self.parts.checkpoints.save_dir)
        except Exception as e:  # noqa: BLE001 - no checkpoint, or none readable: say so
            last = f"none usable ({e})"
        text = (f"{text}; last complete checkpoint: {last or 'none (nothing saved yet)'}. Fix: check that node, "
                f"then run again with run.resume=auto to continue from it")
        active = [a for a in self.board.snapshot()[0] if a.part == "driver"] or [Active("driver", "?", time.monotonic())]
        self.diagnose(active[0], time.monotonic() - active[0].since, 0.0, [], cause={"kind": kind, "text": text})
        self._stop_run("STOP")

    def _stop_run(self, what: str = "STALL") -> None:
        self.stopping = True
        print(f"[rlrun] {what}: {self.diagnosis['summary']}", file=self.out, flush=True)
        if self._previous is None:  # not the main thread's run (a test): the caller reads .diagnosis
            return
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
        if not self.done.wait(UNBLOCK_AFTER_S):
            # ray.get does not run Python signal handlers while it waits: a driver waiting on a
            # hung trainer rank is freed by ending the ranks (teardown would end them anyway)
            print("[rlrun] the driver waits in Ray: ending the trainer ranks to stop the run", file=self.out, flush=True)
            try:
                self.parts.trainer.shutdown()
            except Exception as e:  # noqa: BLE001 - the grace below still bounds the exit
                print(f"[rlrun] ending the trainer ranks failed: {e}", file=self.out, flush=True)
        if not self.done.wait(EXIT_GRACE_S):
            print(f"[rlrun] the driver did not leave the stalled run within {EXIT_GRACE_S:.0f} s; exiting",
                  file=self.out, flush=True)
            os._exit(3)

    def diagnose(self, a: Active, elapsed: float, limit: float, history: list[float], cause: dict | None = None) -> dict:
        t0 = time.monotonic()
        rollout = getattr(self.parts, "rollout", None)
        engines = engine_state(getattr(rollout, "engines", None))
        router = getattr(rollout, "router", None)
        router_state = _get(f"{router.url}/workers") if getattr(router, "url", None) else None
        driver = thread_stacks()
        procs = process_stacks(run_processes())
        hist = f"median {statistics.median(history):.1f} s of {len(history)}" if history else "no history yet"
        if cause is None:
            cause = likely_cause(a, engines, procs, driver)
            summary = (f"phase {a.phase!r} of the {a.part} ran {elapsed:.0f} s, past its bound of {limit:.0f} s "
                       f"({hist}); likely cause: {cause['text']}. Diagnosis: {self.run_dir / DIAGNOSIS_JSON}")
        else:
            summary = f"{cause['text']} (in phase {a.phase!r} of the {a.part}). Diagnosis: {self.run_dir / DIAGNOSIS_JSON}"
        d = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "summary": summary, "cause": cause,
             "stalled": {"part": a.part, "phase": a.phase, "thread": a.thread, "elapsed_s": round(elapsed, 1),
                         "bound_s": round(limit, 1), "history_s": history[-20:]},
             "phases": [{"part": x.part, "phase": x.phase, "running_s": round(time.monotonic() - x.since, 1)}
                        for x in self.board.snapshot()[0]],
             "engines": engines, "router": router_state, "last_metrics": last_metrics(self.run_dir),
             "driver_threads": driver, "processes": procs, "on_stall": self.w.on_stall,
             "collect_s": round(time.monotonic() - t0, 1)}
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / DIAGNOSIS_JSON).write_text(json.dumps(d, indent=1, default=str))
        (self.run_dir / DIAGNOSIS_TXT).write_text(readable(d))
        self.diagnosis = d
        if self.w.on_stall == "wait":
            print(f"[rlrun] STALL (waiting on, checks.watchdog.on_stall=wait): {summary}", file=self.out, flush=True)
        return d


def readable(d: dict) -> str:
    lines = [f"rlrun stall diagnosis, {d['time']}", "", d["summary"], "",
             f"likely cause ({d['cause']['kind']}): {d['cause']['text']}", "", "phases running:"]
    lines += [f"  {p['part']}: {p['phase']} for {p['running_s']} s" for p in d["phases"]]
    lines += ["", "engines:"]
    for e in d["engines"]:
        hg = e.get("health_generate", {})
        lines.append(f"  engine {e['engine']} {e['url']}: alive={e.get('alive')} health_generate="
                     f"{'ok' if hg.get('ok') else hg.get('error') or hg.get('status')} load={e.get('load', {}).get('body')}")
    lines += ["", f"router workers: {(d['router'] or {}).get('body')}", "",
              f"last metrics row: {json.dumps(d['last_metrics'])[:500]}", "", "processes:"]
    for pid, p in d["processes"].items():
        top = (p.get("stack") or "").strip().splitlines()[:6]
        lines.append(f"  {pid} {p['cmd'][:80]}" + ("".join("\n      " + t.strip() for t in top) if top else
                                                  f"  ({p.get('py_spy_error', '')[:80]})"))
    lines += ["", "driver threads (full stacks in diagnosis.json):"]
    for name, stack in d["driver_threads"].items():
        last = [ln for ln in stack.splitlines() if ln.strip().startswith("File ")][-2:]
        lines.append(f"  {name}: " + " <- ".join(ln.strip() for ln in reversed(last)))
    return "\n".join(lines) + "\n"
