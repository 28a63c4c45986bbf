"""The stall watchdog (rlrun.guard.watchdog): bounds from a phase's history, a stalled driver
stopped with diagnosis.json naming the cause, wait mode, an engine that does not answer.

The engine that does not answer is a socket that accepts and never replies (a real hung engine
needs Ray and a model: tests/integration/test_guard_runner.py stalls real hf engines)."""
from __future__ import annotations

import io
import json
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from rlrun.config import ConfigError, load
from rlrun.guard.watchdog import (BOARD, DIAGNOSIS_JSON, DIAGNOSIS_TXT, Active, PhaseBoard, StallError, Watchdog,
                                  bound_s, likely_cause)

FAST = ["checks.watchdog.floor_s=0.5", "checks.watchdog.first_s=0.5", "checks.watchdog.poll_s=0.1"]


def test_the_bound_is_factor_times_the_median_with_a_floor():
    w = load([]).checks.watchdog  # factor 10, floor 600, first 3600
    assert bound_s(w, []) == 3600.0
    assert bound_s(w, [10.0, 20.0, 300.0]) == 600.0  # 10 x 20 = 200 < floor 600
    assert bound_s(w, [100.0, 90.0, 120.0]) == 1000.0  # 10 x median 100


def test_watchdog_settings_are_validated():
    with pytest.raises(ConfigError) as e:
        load(["checks.watchdog.poll_s=700", "checks.watchdog.first_s=100"])
    assert "checks.watchdog.poll_s" in str(e.value) and "checks.watchdog.first_s" in str(e.value)
    load(["checks.watchdog.on_stall=off", "checks.watchdog.poll_s=700"])  # off: nothing to poll


def test_phases_nest_per_part_and_keep_their_durations():
    b = PhaseBoard()
    with b.phase("driver", "train"):
        with b.phase("driver", "inner"):
            assert [a.phase for a in b.snapshot()[0]] == ["inner"]
        assert [a.phase for a in b.snapshot()[0]] == ["train"]
    active, hist = b.snapshot()
    assert active == [] and set(hist) == {("driver", "train"), ("driver", "inner")}


def slow_data_source(stop: threading.Event):
    while not stop.is_set():  # a data source that never yields (short sleeps: the signal gets in)
        time.sleep(0.05)


def test_a_stalled_driver_is_stopped_with_a_diagnosis_naming_the_data_source(tmp_path):
    cfg = load(FAST)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, "rollout/reward_mean": 0.25}) + "\n")
    out, never = io.StringIO(), threading.Event()
    t0 = time.monotonic()
    with pytest.raises(StallError) as e:
        with Watchdog(cfg, tmp_path, parts=None, out=out):
            with BOARD.phase("driver", "rollout"):
                slow_data_source(never)
    took = time.monotonic() - t0
    assert 0.5 < took < 0.5 + 0.1 + 10  # bound + a poll + the time to collect the stacks
    assert "phase 'rollout' of the driver ran" in str(e.value) and "data source" in str(e.value)
    d = json.loads((tmp_path / DIAGNOSIS_JSON).read_text())
    assert d["cause"]["kind"] == "data_source" and "slow_data_source" in d["cause"]["text"]
    assert d["stalled"]["bound_s"] == 0.5 and d["last_metrics"] == {"step": 0, "rollout/reward_mean": 0.25}
    assert any("slow_data_source" in s for s in d["driver_threads"].values())
    assert "likely cause (data_source)" in (tmp_path / DIAGNOSIS_TXT).read_text()
    assert "STALL:" in out.getvalue()


def test_wait_mode_writes_the_diagnosis_and_lets_the_phase_finish(tmp_path):
    cfg = load([*FAST, "checks.watchdog.on_stall=wait"])
    with Watchdog(cfg, tmp_path, out=io.StringIO()):
        with BOARD.phase("driver", "train"):
            deadline = time.monotonic() + 5
            while not (tmp_path / DIAGNOSIS_JSON).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
    d = json.loads((tmp_path / DIAGNOSIS_JSON).read_text())
    assert d["stalled"]["phase"] == "train" and d["on_stall"] == "wait"


def test_a_resumed_run_bounds_its_phases_by_its_own_history(tmp_path):
    rows = [{"step": i, "time/train_s": s, "time/step_s": 99.0} for i, s in enumerate([1.0, 2.0, 3.0])]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    board = PhaseBoard()
    with Watchdog(load(["checks.watchdog.on_stall=off"]), tmp_path, board=board):
        assert board.snapshot()[1] == {("driver", "train"): [1.0, 2.0, 3.0]}


@pytest.fixture
def hung_engine():
    """A listening socket that accepts and never answers (an engine whose server is stuck)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    srv.close()


def test_an_engine_that_does_not_answer_is_named(tmp_path, hung_engine):
    engine = SimpleNamespace(url=hung_engine, alive=lambda: True)
    parts = SimpleNamespace(rollout=SimpleNamespace(engines=SimpleNamespace(engines=[engine]), router=None))
    wd = Watchdog(load(FAST), tmp_path, parts=parts, out=io.StringIO())
    t0 = time.monotonic()
    d = wd.diagnose(Active("driver", "rollout", time.monotonic() - 1, "MainThread"), 1.0, 0.5, [])
    assert time.monotonic() - t0 < 30  # probes time out after 5 s each
    assert d["cause"]["kind"] == "engine_not_answering"
    assert f"engine 0 ({hung_engine}) /health_generate ReadTimeout" in d["cause"]["text"]


def test_a_rank_waiting_in_a_collective_is_told_from_one_that_is_not():
    procs = {"101": {"cmd": "ray::_Rank.call", "stack": "Thread 101 (idle): \"MainThread\"\n"
                     "    all_reduce (torch/distributed/distributed_c10d.py:2800)\n    step (rlrun/train/x.py:3)\n"},
             "102": {"cmd": "ray::_Rank.call", "stack": "Thread 102 (idle): \"MainThread\"\n"
                     "    sleep (time.py:1)\n    train_step (rlrun/train/x.py:9)\n"}}
    c = likely_cause(Active("driver", "train", 0.0, "MainThread"), [], procs, {})
    assert c["kind"] == "rank_in_collective"
    assert "pid 101 in all_reduce" in c["text"] and "not in it: trainer process(es) ['102']" in c["text"]


def test_fail_stops_the_run_naming_the_cause_and_the_last_checkpoint(tmp_path):
    """EngineGroup.on_fatal -> Watchdog.fail from the monitor thread: StallError in the main thread."""
    save = tmp_path / "checkpoints"
    parts = SimpleNamespace(checkpoints=SimpleNamespace(save_dir=save), rollout=None)
    never = threading.Event()
    with pytest.raises(StallError) as e:
        with Watchdog(load(["checks.watchdog.on_stall=off"]), tmp_path, parts=parts, out=io.StringIO()) as wd:
            threading.Timer(0.2, wd.fail, ["engine 1 on node 10.0.0.7 failed again after 3 restart(s)"]).start()
            with BOARD.phase("driver", "rollout"):
                slow_data_source(never)
    assert str(e.value).startswith("engine 1 on node 10.0.0.7 failed again after 3 restart(s); last complete "
                                   "checkpoint: none")
    assert "run.resume=auto" in str(e.value)
    d = json.loads((tmp_path / DIAGNOSIS_JSON).read_text())
    assert d["cause"]["kind"] == "engine_restarts_exhausted" and d["stalled"]["phase"] == "rollout"
