"""`rlrun submit` ships rlrun to the job (runtime_env py_modules, rlrun.launch.jobs.ship): a real `ray start --head`
(Ray's default settings: token auth on, as Ray turns it on when it finds a token) whose Python has Ray and rlrun's
dependencies but not rlrun, and whose PATH has no `rlrun` script (the new user's head: `/bin/sh: 1: rlrun: not
found` before). The job runs the tiny job to its end, its trainer rank and engine importing the shipped rlrun.

The head's Python is a venv of this interpreter's base Python whose only site entry is this venv's site-packages
as a plain path (a .pth line): Ray and every dependency import, while rlrun's editable install (a .pth inside that
folder, which a plain path entry does not run) does not."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

import raycluster
from raycluster import LocalRayCluster
from rlrun.metrics import METRICS_FILE, read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def head_python(root: Path) -> Path:
    """A Python with Ray and rlrun's dependencies and no rlrun; its bin/ holds `python` and `ray`, not `rlrun`."""
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    site = Path(subprocess.run([str(root / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], check=True, capture_output=True, text=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    ray = root / "bin" / "ray"
    ray.write_text(f"#!{root / 'bin' / 'python'}\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n")
    ray.chmod(0o755)
    return root / "bin"


@pytest.fixture(scope="module")
def cluster():
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_TOKEN_PATH",)}
    tmp = Path(tempfile.mkdtemp(prefix="rlsh", dir="/tmp"))  # short: Ray's socket paths < 107 characters
    bin_dir = head_python(tmp / "py")
    plain_env = raycluster.env

    def head_env(token_path=None):  # the head's processes: its own Python first on PATH, no rlrun anywhere
        e = plain_env(token_path)
        e.pop("PYTHONPATH", None)
        e["PATH"] = f"{bin_dir}:/usr/bin:/bin"
        return e

    raycluster.env, raycluster.RAY = head_env, str(bin_dir / "ray")
    c = LocalRayCluster(tmp)
    try:
        c.start_head(num_cpus=4, num_gpus=0)
        c.use_token()
        c.wait_nodes(1)
        yield c, bin_dir, plain_env
    finally:
        raycluster.env, raycluster.RAY = plain_env, str(Path(sys.executable).with_name("ray"))
        c.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_the_job_finds_rlrun_although_the_heads_python_and_path_lack_it(cluster, tmp_path):
    c, bin_dir, client_env = cluster
    head = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    assert shutil.which("rlrun", path=head["PATH"]) is None
    probe = subprocess.run(["python", "-c", "import ray, hydra, torch\ntry:\n import rlrun\nexcept ImportError:\n"
                            " print('no rlrun')"], env=head, capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == "no rlrun", probe.stdout + probe.stderr
    r = subprocess.run([sys.executable, "-m", "rlrun.cli", "submit", "rollout.num_rollout=1", "logging.progress=false",
                        "logging.wandb.mode=disabled", f"run.output_dir={tmp_path / 'out'}", "--address", c.dashboard,
                        "--follow"], cwd=tmp_path, env=client_env(), text=True, capture_output=True, timeout=500)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "entrypoint: python -m rlrun.cli run" in out and "not found" not in out, out[-4000:]
    assert re.search(r"job rlrun-tiny-grpo-cpu-\S+: SUCCEEDED", r.stdout), out[-3000:]
    assert [row["step"] for row in read_metrics(next((tmp_path / "out").glob(f"*/*/{METRICS_FILE}")))] == [0]
