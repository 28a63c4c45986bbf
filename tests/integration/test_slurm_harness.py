"""The `rlrun export slurm` script run under a Slurm stand-in: `srun` and `scontrol` shims on PATH,
the SLURM_* variables sbatch would set, two "nodes" on this machine.

The shims only do what Slurm would: `scontrol show hostnames` lists the allocation, `srun` drops
its options and runs the command "on" the node named by -w. Since both nodes are this machine, the
srun shim gives each node's `ray start` its own temp dir and free ports (separate machines have
their own). Everything else is the script's own doing: real `ray start --head/--address --block`
processes, the join barrier, the tiny job on both nodes with cluster.address=auto, the teardown.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from raycluster import SRC, free_ports
from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.launch import slurm
from rlrun.launch.reaper import start_time

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

SCONTROL = """#!/bin/bash
# scontrol show hostnames LIST -> the harness's node names, one a line
[ "$1 $2" = "show hostnames" ] || { echo "scontrol shim: unsupported: $*" >&2; exit 1; }
tr ' ' '\\n' <<< "$HARNESS_HOSTS"
"""
SRUN = """#!/bin/bash
# srun [options] CMD...: run CMD here, "on" the node given by -w; `$PYTHON -m ray.scripts.scripts start` gets that node's own
# temp dir and free ports (on a real cluster the nodes are separate machines).
node=""
while [ $# -gt 0 ]; do
  case "$1" in
    -w) node="$2"; shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [ "$2 $3 $4" = "-m ray.scripts.scripts start" ] && [ -n "$node" ]; then
  read -r a b c d e f < <("$HARNESS_PYTHON" -c 'import socket
ss = [socket.socket() for _ in range(6)]
[s.bind(("127.0.0.1", 0)) for s in ss]
print(*[s.getsockname()[1] for s in ss])')
  set -- "$@" --temp-dir="$HARNESS_TMP/$node" --node-manager-port="$a" --object-manager-port="$b" \\
    --dashboard-agent-listen-port="$c" --dashboard-agent-grpc-port="$d" --metrics-export-port="$e" \\
    --runtime-env-agent-port="$f" --disable-usage-stats
  case " $* " in *" --head "*) set -- "$@" --dashboard-port="$HARNESS_DASHBOARD_PORT" \\
    --ray-client-server-port="$HARNESS_CLIENT_PORT" --include-dashboard=false ;; esac
fi
exec "$@"
"""


def _procs_under(tmp: Path) -> list[int]:
    """Live processes started under the harness: they carry HARNESS_TMP=tmp in their environment
    (Ray's workers too, whose command lines name nothing)."""
    mark = f"HARNESS_TMP={tmp}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


@pytest.fixture
def short_tmp():
    # Ray's unix sockets live under its temp dir and must stay under 107 characters: pytest's tmp_path is too long
    path = Path(tempfile.mkdtemp(prefix="rlsl", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_sbatch_script_runs_the_job_on_two_nodes_and_tears_down(short_tmp):
    tmp = short_tmp
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    overrides = ["train.num_nodes=2", "train.gpus_per_node=1", "cluster.num_nodes=2", "cluster.cpus_per_node=1",
                 "rollout.num_rollout=2", f"run.output_dir={tmp / 'out'}", "logging.wandb.mode=disabled",
                 "logging.progress=false"]
    cfg = load(overrides)
    script = tmp / "job.sbatch"
    script.write_text(slurm.script(cfg, make_plan(cfg), overrides, None))
    gcs, dashboard, client = free_ports(3)
    env = dict(os.environ, PATH=f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}", PYTHONPATH=SRC,
               SLURM_JOB_NODELIST="node[0-1]", SLURM_CPUS_PER_TASK="1", SLURM_JOB_NUM_NODES="2",
               HARNESS_HOSTS="node0 node1", HARNESS_TMP=str(tmp), HARNESS_PYTHON=sys.executable,
               HARNESS_DASHBOARD_PORT=str(dashboard), HARNESS_CLIENT_PORT=str(client),
               RLRUN_RAY_PORT=str(gcs), RLRUN_PYTHON=sys.executable)
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen(["bash", str(script)], cwd=tmp, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=330)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30  # workers notice their raylet's exit within seconds
        while _procs_under(tmp) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = [(p, start_time(p)) for p in _procs_under(tmp)]
        for pid, started in left:  # cleanup by pid, whatever the assertions below say
            if started and start_time(pid) == started:
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-5000:]
    assert "rlrun: 2 Ray node(s) joined" in out and "[rlrun] done: 2 steps" in out, out[-5000:]
    assert not left, f"processes outlived the script's teardown: {left}"
