"""The tiny job on a real two-node Ray cluster: `ray start --head` + `ray start --address`, separate
processes (tests/integration/raycluster.py), 1 CPU and 2 logical GPUs each.

The job is the default CPU job laid over two plan nodes (train.num_nodes=2, one trainer rank and one
engine per node). On the cpu profile a bundle is {"CPU": 1}, so with one CPU per Ray node the
placement group must use both nodes, and placement matches plan node i to the i-th Ray node in
hardware order. What is asserted comes from Ray's own state API (actors' node ids, the placement
group's bundles), not from rlrun's view of it.

    submit --follow (config dir carried in the working dir, distributed weight sync across nodes),
    jobs / logs / stop, a plan larger than the cluster (exit 2), the worker node's raylet SIGKILLed
    mid-run (NodeLostError naming it and the last checkpoint), run.resume=auto after a new worker joined.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raycluster import NO_AUTH, LocalRayCluster, env
from rlrun.metrics import METRICS_FILE, read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TWO_NODES = ["train.num_nodes=2", "train.gpus_per_node=1", "cluster.num_nodes=2",
             "logging.wandb.mode=disabled", "logging.progress=false", "rollout.num_rollout=4"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    saved = {k: os.environ.get(k) for k in NO_AUTH}
    os.environ.update(NO_AUTH)  # this process's state-API and Jobs-API clients
    c = LocalRayCluster(tmp_path_factory.mktemp("rc"))
    try:
        c.start_head(num_cpus=1, num_gpus=2)
        c.wait_nodes(1)
        c.add_worker(num_cpus=1, num_gpus=2)
        c.wait_nodes(2)
        yield c
    finally:
        c.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def rlrun(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlrun.cli", *args], cwd=cwd, env=env(), text=True,
                          capture_output=True, timeout=timeout)


def hardware_order(c: LocalRayCluster) -> list[str]:
    """Node ids as placement orders them: (IP, node id); both nodes share this machine's IP."""
    from rlrun.launch.cluster import live_nodes

    return [n.node_id for n in sorted(live_nodes(c.dashboard), key=lambda n: (n.ip, n.node_id))]


def placed_actors(c: LocalRayCluster, timeout_s: float = 240) -> dict[str, str]:
    """repr_name -> node id of the run's alive trainer ranks and engines, once all four are up."""
    from ray.util.state import list_actors

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        actors = list_actors(address=c.dashboard, filters=[("state", "=", "ALIVE")], detail=True,
                             raise_on_missing_output=False)
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


def test_submit_follow_runs_on_both_nodes_as_planned(cluster, tmp_path):
    wd = tmp_path / "project"
    (wd / "conf" / "experiment").mkdir(parents=True)
    (wd / "conf" / "experiment" / "two_nodes.yaml").write_text(
        "# @package _global_\ntrain:\n  num_nodes: 2\n  gpus_per_node: 1\ncluster:\n  num_nodes: 2\n")
    out_dir = tmp_path / "shared"  # the "shared storage": both nodes are this machine
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlrun.cli", "submit", "experiment=two_nodes", f"run.output_dir={out_dir}",
         "rollout.weight_sync=distributed", *TWO_NODES[3:], "--config-dir", "conf", "--address", cluster.dashboard,
         "--follow"], cwd=wd, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        where = placed_actors(cluster)
        from ray.util.state import list_placement_groups

        pgs = [p for p in list_placement_groups(address=cluster.dashboard, detail=True) if p.state == "CREATED"]
        out, _ = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-4000:]
    order = hardware_order(cluster)
    # plan: node 0 holds trainer rank 0 + engine 0, node 1 holds trainer rank 1 + engine 1
    assert where == {"trainer rank 0": order[0], "engine 0": order[0],
                     "trainer rank 1": order[1], "engine 1": order[1]}, where
    assert len(pgs) == 1 and {b["node_id"] for b in pgs[0].bundles} == set(order), pgs
    assert re.search(r"submitted job rlrun-tiny-grpo-cpu-\S+ to http://127.0.0.1", out)
    assert "--config-dir conf" in out and "cluster.address=auto" in out
    assert "[rlrun] done: 4 steps" in out and "SUCCEEDED" in out
    run_dir = next(out_dir.glob("tiny-grpo-cpu/*/config.yaml")).parent
    rows = read_metrics(run_dir / METRICS_FILE)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert all(r["perf/weight_sync_gb"] > 0 for r in rows)  # every step broadcast its weights across nodes


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
    assert JobSubmissionClient(cluster.dashboard).get_job_status(job).value == "STOPPED"
    logs = rlrun("logs", job, "--address", cluster.dashboard, cwd=tmp_path, timeout=60)
    assert "run dir: " in logs.stdout
    # the runner's SIGTERM teardown ran inside Ray's grace period: the plot of the steps so far is drawn
    assert (run_dirs()[0].parent / "reward_length.png").is_file()


def test_lost_node_names_it_and_the_checkpoint_then_resume_continues(cluster, tmp_path):
    args = [*TWO_NODES[:-1], "rollout.num_rollout=8", "checkpoint.save_interval=2", f"run.output_dir={tmp_path}",
            f"cluster.address={cluster.address}"]
    proc = subprocess.Popen([sys.executable, "-m", "rlrun.cli", *args], cwd=tmp_path, env=env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        latest = None
        while time.monotonic() < deadline and proc.poll() is None:
            found = list(tmp_path.glob("*/*/checkpoints/latest"))
            if found and found[0].read_text() >= "iter_0000002":
                latest = found[0]
                break
            time.sleep(0.5)
        assert latest is not None, proc.communicate(timeout=60)[0][-4000:]
        worker = cluster.nodes[1]
        lost_id = hardware_order(cluster)
        killed_at = time.monotonic()
        os.kill(worker.raylet_pid(), 9)
        out, _ = proc.communicate(timeout=180)
        took = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out[-4000:]
    assert took < 120, f"the run took {took:.0f} s to stop after the node was lost"
    assert "NodeLostError" in out, out[-4000:]
    msg = out[out.index("NodeLostError"):]
    last = latest.read_text()
    assert f"checkpoints/{last}" in msg and "run.resume=auto" in msg, msg[:2000]
    dead = [n for n in lost_id if n[:12] in msg]
    assert len(dead) == 1, msg[:2000]

    cluster.kill(worker)  # what the raylet left behind on that node
    cluster.nodes.remove(worker)
    cluster.add_worker(num_cpus=1, num_gpus=2)
    cluster.wait_nodes(2)
    args = [a for a in args if not a.startswith("cluster.address")] + [f"cluster.address={cluster.address}"]
    resumed = subprocess.run([sys.executable, "-m", "rlrun.cli", *args, "run.resume=auto"], cwd=tmp_path, env=env(),
                             text=True, capture_output=True, timeout=400)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-4000:]
    run_dir = latest.parent.parent
    assert f"resumed from {run_dir / 'checkpoints' / last}" in resumed.stdout
    assert [r["step"] for r in read_metrics(run_dir / METRICS_FILE)] == list(range(8))
    assert (run_dir / "checkpoints" / "latest").read_text() == "iter_0000008"
