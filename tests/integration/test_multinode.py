"""The tiny job on a real two-node Ray cluster: `ray start --head` + `ray start --address`, separate
processes (tests/integration/raycluster.py), 1 CPU and 2 logical GPUs each.

The job is the default CPU job laid over two plan nodes (train.num_nodes=2, one trainer rank and one
engine per node). On the cpu profile a bundle is {"CPU": 1}, so with one CPU per Ray node the
placement group must use both nodes, and placement matches plan node i to the i-th Ray node in
hardware order. What is asserted comes from Ray's own state API (actors' node ids, the placement
group's bundles), not from rlrun's view of it.

    a plan larger than the cluster (exit 2); submit, jobs, stop (SIGTERM teardown), logs; the worker
    node's raylet SIGKILLed mid-run (NodeLostError naming it and the last checkpoint), then, after a
    new worker joined, `submit run.resume=auto --follow` continuing it (the config dir carried in the
    working dir; weight sync by disk across the nodes, verified by sha256 on every engine). That resume
    is also the test of `submit --follow` under token auth (a separate 2-rollout submit --follow repeated
    its ~40 s of job start-up for no assertion the resume lacks).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from raycluster import LocalRayCluster, env
from rlrun.metrics import METRICS_FILE, read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TWO_NODES = ["train.num_nodes=2", "train.gpus_per_node=1", "cluster.num_nodes=2",
             "logging.wandb.mode=disabled", "logging.progress=false", "rollout.num_rollout=4"]


@pytest.fixture(scope="module")
def cluster():
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_TOKEN_PATH",)}
    # short: Ray's unix sockets under the temp dir must stay under 107 characters
    c = LocalRayCluster(Path(tempfile.mkdtemp(prefix="rlmn", dir="/tmp")))
    try:
        c.start_head(num_cpus=1, num_gpus=2)  # token auth on: Ray's default when a token is found
        c.use_token()  # this process's and the rlrun commands' clients find it through RAY_AUTH_TOKEN_PATH
        c.wait_nodes(1)
        c.add_worker(num_cpus=1, num_gpus=2)
        c.wait_nodes(2)
        yield c
    finally:
        c.stop()
        shutil.rmtree(c.tmp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def rlrun(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlrun.cli", *args], cwd=cwd, env=env(), text=True,
                          capture_output=True, timeout=timeout)


def explicit_address_env() -> dict[str, str]:
    """A driver joining by an explicit cluster.address: Ray turns token auth on only for a cluster it finds
    itself (address None/auto, ray/_private/worker.py), so it needs RAY_AUTH_MODE=token (docs/cluster.md)."""
    return {**env(), "RAY_AUTH_MODE": "token"}


def hardware_order(c: LocalRayCluster) -> list[str]:
    """Node ids as placement orders them: (IP, node id); both nodes share this machine's IP."""
    from rlrun.launch.cluster import live_nodes

    return [n.node_id for n in sorted(live_nodes(c.dashboard), key=lambda n: (n.ip, n.node_id))]


def placed_actors(c: LocalRayCluster, timeout_s: float = 240) -> dict[str, str]:
    """repr_name -> node id of the run's alive trainer ranks and engines, once all four are up."""
    from ray.util.state.common import ListApiOptions, StateResource

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        actors = c.state_client().list(StateResource.ACTORS, raise_on_missing_output=False,
                                       options=ListApiOptions(filters=[("state", "=", "ALIVE")], detail=True))
        found = {a.repr_name: a.node_id for a in actors if a.repr_name.startswith(("trainer rank", "engine"))}
        if len(found) == 4:
            return found
        time.sleep(1.0)
    raise TimeoutError(f"the run's 4 actors were not alive within {timeout_s} s")


def test_submit_refuses_a_plan_larger_than_the_cluster(cluster, tmp_path):
    # hardware=h100: one node of 8 GPUs; the live cluster has 2 nodes of 2 (logical) GPUs.
    r = rlrun("submit", "hardware=h100", "--address", cluster.dashboard, cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "the plan does not fit the Ray cluster" in r.stderr
    assert "1 node(s) with [8] GPUs" in r.stderr and "2 alive node(s) with [2, 2] GPUs" in r.stderr
    assert "submitted job" not in r.stdout


def test_jobs_logs_and_stop(cluster, tmp_path):
    from ray.job_submission import JobSubmissionClient

    r = rlrun("submit", *TWO_NODES[:-1], "rollout.num_rollout=500", f"run.output_dir={tmp_path / 'out'}",
              "--address", cluster.dashboard, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    job = re.search(r"submitted job (\S+)", r.stdout).group(1)
    run_dirs = lambda: list((tmp_path / "out").glob("*/*/metrics.jsonl"))  # noqa: E731
    deadline = time.monotonic() + 240
    while not (run_dirs() and run_dirs()[0].read_text()) and time.monotonic() < deadline:
        time.sleep(1.0)
    assert run_dirs(), "the submitted run logged no step"
    listed = rlrun("jobs", "--address", cluster.dashboard, cwd=tmp_path, timeout=60)
    assert re.search(rf"{re.escape(job)}\s+RUNNING", listed.stdout), listed.stdout
    t0 = time.monotonic()
    stopped = rlrun("stop", job, "--address", cluster.dashboard, cwd=tmp_path, timeout=120)
    assert stopped.returncode == 0 and f"job {job}: STOPPED" in stopped.stdout, stopped.stdout + stopped.stderr
    assert time.monotonic() - t0 < 90
    assert JobSubmissionClient(cluster.dashboard, headers=cluster.headers()).get_job_status(job).value == "STOPPED"
    logs = rlrun("logs", job, "--address", cluster.dashboard, cwd=tmp_path, timeout=60)
    assert "run dir: " in logs.stdout
    # the runner's SIGTERM teardown ran inside Ray's grace period: the plot of the steps so far is drawn
    assert (run_dirs()[0].parent / "reward_length.png").is_file(), logs.stdout[-4000:]


def test_lost_node_then_resume_through_submit_follow(cluster, tmp_path):
    """Kill the worker node mid-run: the run stops naming it and the last checkpoint. A new worker
    joins; `rlrun submit run.resume=auto --follow` (the layout from an experiment in the uploaded
    config dir) continues the run on both nodes, placed as the plan says."""
    out_dir = tmp_path / "shared"  # the "shared storage" (checkpoints, disk weight sync): one machine here
    # 12 rollouts: the kill at the first checkpoint (2) must land mid-run even when the machine is idle
    args = [*TWO_NODES[3:-1], "rollout.num_rollout=12", "checkpoint.save_interval=2", f"run.output_dir={out_dir}"]
    proc = subprocess.Popen([sys.executable, "-m", "rlrun.cli", *TWO_NODES[:3], *args,
                             f"cluster.address={cluster.address}"], cwd=tmp_path, env=explicit_address_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        latest = None
        while time.monotonic() < deadline and proc.poll() is None:
            found = list(out_dir.glob("*/*/checkpoints/latest"))
            if found and found[0].read_text() >= "iter_0000002":
                latest = found[0]
                break
            time.sleep(0.5)
        assert latest is not None, proc.communicate(timeout=60)[0][-4000:]
        worker = cluster.nodes[1]
        both = hardware_order(cluster)
        killed_at = time.monotonic()
        os.kill(worker.raylet_pid(), 9)
        out, _ = proc.communicate(timeout=180)
        took = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"\n[measured] worker raylet SIGKILLed -> rlrun exited in {took:.1f} s")
    assert proc.returncode == 1, f"rc={proc.returncode}\n{out[-4000:]}"
    assert took < 120, f"the run took {took:.0f} s to stop after the node was lost"
    assert "NodeLostError" in out, out[-4000:]
    msg = out[out.index("NodeLostError"):].splitlines()[0]  # printed at once, before the teardown
    last = latest.read_text()
    assert f"checkpoints/{last}" in msg and "run.resume=auto" in msg, msg[:2000]
    assert len([n for n in both if n[:12] in msg]) == 1, msg[:2000]  # the worker, not the head

    cluster.kill(worker)  # what the raylet left behind on that node
    cluster.nodes.remove(worker)
    cluster.add_worker(num_cpus=1, num_gpus=2)
    cluster.wait_nodes(2)

    wd = tmp_path / "project"
    (wd / "conf" / "experiment").mkdir(parents=True)
    (wd / "conf" / "experiment" / "two_nodes.yaml").write_text(
        "# @package _global_\ntrain:\n  num_nodes: 2\n  gpus_per_node: 1\ncluster:\n  num_nodes: 2\n")
    sub = subprocess.Popen([sys.executable, "-m", "rlrun.cli", "submit", "experiment=two_nodes", *args, "run.resume=auto",
                            "--config-dir", "conf", "--address", cluster.dashboard, "--follow"],
                           cwd=wd, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        where = placed_actors(cluster)
        from ray.util.state.common import ListApiOptions, StateResource

        pgs = [p for p in cluster.state_client().list(StateResource.PLACEMENT_GROUPS, options=ListApiOptions(detail=True),
                                                      raise_on_missing_output=False) if p.state == "CREATED"]
        out, _ = sub.communicate(timeout=400)
    finally:
        if sub.poll() is None:
            sub.kill()
    assert sub.returncode == 0, out[-4000:]
    order = hardware_order(cluster)
    # plan: node 0 holds trainer rank 0 + engine 0, node 1 holds trainer rank 1 + engine 1
    assert where == {"trainer rank 0": order[0], "engine 0": order[0],
                     "trainer rank 1": order[1], "engine 1": order[1]}, where
    assert len(pgs) == 1 and {b["node_id"] for b in pgs[0].bundles} == set(order), pgs
    assert re.search(r"submitted job rlrun-tiny-grpo-cpu-\S+ to http://127.0.0.1", out)
    assert "--config-dir conf" in out and "cluster.address=auto" in out
    # --follow waited for the job and printed its end (the cluster uses token auth: every request carried it)
    assert re.search(r"job rlrun-tiny-grpo-cpu-\S+: SUCCEEDED", out), out[-2000:]
    run_dir = latest.parent.parent
    assert f"resumed from {run_dir / 'checkpoints' / last}" in out
    assert [r["step"] for r in read_metrics(run_dir / METRICS_FILE)] == list(range(12))
    assert (run_dir / "checkpoints" / "latest").read_text() == "iter_0000012"


def test_token_auth_is_on_and_the_cluster_commands_say_what_is_missing(cluster, tmp_path):
    """The head runs with Ray's default auth settings and found a token: a request without it is refused
    (401), so every command above passed through rlrun's token lookup (RAY_AUTH_TOKEN_PATH here). Without
    the token, with a wrong one, and for an unknown job id: a message and exit 2, no traceback."""
    import requests

    assert requests.get(f"{cluster.dashboard}/api/jobs/", timeout=30).status_code == 401
    no_token = {**env(tmp_path / "missing_token"), "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "rlrun.cli", "jobs", "--address", cluster.dashboard], cwd=tmp_path,
                       env=no_token, text=True, capture_output=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "uses token authentication and no token was found" in r.stderr and "missing_token" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "rlrun.cli", "jobs", "--address", cluster.dashboard], cwd=tmp_path,
                       env={**env(), "RAY_AUTH_TOKEN": "0" * 64}, text=True, capture_output=True, timeout=120)
    assert r.returncode == 2 and "rejected the token from $RAY_AUTH_TOKEN" in r.stderr, r.stderr
    for cmd in ("logs", "stop"):
        r = rlrun(cmd, "nope", "--address", cluster.dashboard, cwd=tmp_path, timeout=120)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "HTTP 404" in r.stderr and "rlrun jobs lists the job ids" in r.stderr, r.stderr
