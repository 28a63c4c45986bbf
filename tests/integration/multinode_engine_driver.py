"""Driver of tests/integration/test_sglang_multinode.py, run as its own process (Ray reads RAY_AUTH_MODE when it
is imported, and the test's process may have imported Ray already): joins the cluster at argv[1], realises the
plan of argv[3] (JSON overrides) with rlrun's Placement, starts engine 0 through rlrun's sglang engine factory
with the stand-in server per node (sglang_node_standin.py), puts it behind the real sglang-router in an
EngineGroup, kills the server of node-rank 1, waits for the group to restart the engine, and prints what it saw
as one `RESULT <json>` line. Everything it started is stopped before it exits."""
import json
import os
import signal
import sys
import time
from pathlib import Path

import ray
import requests

from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.launch.env import runtime_env
from rlrun.rollout.engines.sglang.engine import start as start_sglang_engines
from rlrun.launch.env import actor_env
from rlrun.launch.placement import Placement
from rlrun.rollout.engines.group import EngineGroup
from rlrun.rollout.engines.sglang.router.router import Router
from rlrun.rollout.tiny_model import save_tiny_model

STANDIN = (sys.executable, str(Path(__file__).with_name("sglang_node_standin.py")))


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, IndexError):
        return True


def generate(url: str, tries: int = 60) -> int:
    for _ in range(tries):  # the router admits a (re)added worker after its first health check
        try:
            r = requests.post(f"{url}/generate", json={"input_ids": [3, 4], "sampling_params": {"max_new_tokens": 2}},
                              timeout=60)
            if r.status_code == 200:
                return r.json()["meta_info"]["completion_tokens"]
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"no generation through {url}")


def main() -> None:
    address, tmp, overrides = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
    cfg = load(overrides)
    plan = make_plan(cfg)
    ray.init(address=address, include_dashboard=False, log_to_driver=False)
    placement = Placement(plan, "cuda", timeout_s=120)
    out: dict = {"nodes_per_engine": plan.nodes_per_engine,
                 "trainer_node": placement.bundle_of("trainer", 0)[0].node_id,
                 "bundles": [[(b.node_id, b.gpu_id) for b in p] for p in placement.engine_parts(0)]}
    router = Router(policy="round_robin", log_dir=tmp / "logs", health_check_interval_s=1)
    group = None
    try:
        model = save_tiny_model(tmp / "tiny")
        engines, restart = start_sglang_engines(cfg, plan, placement, runtime_env(actor_env("cuda", {})), str(model),
                                                str(tmp / "logs"), launcher=STANDIN)
        first = engines[0]
        out.update(first=first.parts, url=first.url, alive=first.alive())
        router.start()
        group = EngineGroup(router, engines, restart, health_interval_s=0.5, max_restarts=2).start()
        out["tokens_before"] = generate(router.url)
        os.kill(first.parts[1]["pid"], signal.SIGKILL)  # node-rank 1's server dies
        deadline = time.monotonic() + 240
        while group.restarts < 1 and group.fatal is None and time.monotonic() < deadline:
            time.sleep(0.5)
        out.update(restarts=group.restarts, fatal=group.fatal, first_alive_after_kill=first.alive(),
                   first_pids_gone=[gone(p["pid"]) for p in first.parts])
        second = group.engines[0]
        out.update(second=second.parts, second_url=second.url, tokens_after=generate(router.url))
    finally:
        last = group.engines[0] if group is not None else None
        if group is not None:
            group.stop()
        router.stop()
        if last is not None and hasattr(last, "parts"):
            out["last_pids_gone_after_stop"] = [gone(p["pid"]) for p in last.parts]
        placement.remove()
        print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
