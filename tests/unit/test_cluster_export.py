"""`rlrun export slurm|kuberay`, the submit preparation and the plan-vs-live-cluster checks (no Ray started).

The RayJob manifest is validated against KubeRay v1.7.0's RayJob CRD schema (tests/data/kuberay,
its source in the README there), made strict: Kubernetes prunes fields a CRD does not declare
(silently dropped), so every object schema that declares properties gets additionalProperties=false
here and a misspelled field is an error instead.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from rlrun.config import load
from rlrun.config.errors import ConfigError
from rlrun.config.plan import make_plan
from rlrun.launch import kuberay, slurm

SCHEMA = Path(__file__).parents[1] / "data" / "kuberay" / "rayjob-v1.7.0.openapi.json.gz"
SHELLCHECK = Path(sys.executable).with_name("shellcheck")
RLRUN = [sys.executable, "-m", "rlrun.cli"]
TWO_MI300X = ["experiment=qwen3-4b-grpo-mi300x", "cluster.num_nodes=2", "train.num_nodes=2"]
K8S = ["cluster.kuberay.image=registry.example/rlrun:0.1.0", "cluster.kuberay.pvc=rl-shared"]


def _cfg_plan(overrides):
    cfg = load(overrides)
    return cfg, make_plan(cfg)


def _strict(node):
    if isinstance(node, dict):
        node = {k: _strict(v) for k, v in node.items()}
        if "properties" in node and "additionalProperties" not in node \
                and not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
        return node
    return [_strict(v) for v in node] if isinstance(node, list) else node


@pytest.fixture(scope="module")
def rayjob_validator():
    schema = _strict(json.loads(gzip.decompress(SCHEMA.read_bytes())))
    return jsonschema.Draft7Validator(schema)


# -- slurm ---------------------------------------------------------------------------------------
def test_sbatch_is_sized_from_the_plan_and_carries_the_rocm_env():
    cfg, plan = _cfg_plan([*TWO_MI300X, "cluster.slurm.partition=mi300x", "cluster.slurm.time=2-00:00:00"])
    script = slurm.render(cfg, plan, [*TWO_MI300X, "cluster.address=10.0.0.1:6379"], None)
    lines = script.splitlines()
    for want in ("#SBATCH --nodes=2", "#SBATCH --gpus-per-node=8", "#SBATCH --cpus-per-task=64",
                 "#SBATCH --time=2-00:00:00", "#SBATCH --partition=mi300x", "#SBATCH --exclusive",
                 "export HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", "export SGLANG_USE_AITER=1",
                 "NUM_NODES=2", "GPUS_PER_NODE=8"):
        assert want in lines, want
    assert not any(line.startswith("#SBATCH --account") for line in lines)  # null: the user's default
    # the user's cluster.address is replaced: on the allocation the job joins the Ray it started
    assert lines[-1] == ('"$PYTHON" -m rlrun.cli run experiment=qwen3-4b-grpo-mi300x cluster.num_nodes=2 '
                         "train.num_nodes=2 cluster.address=auto")
    # one Python for every step: no bare `ray` or `rlrun` command (the job would mix two environments)
    steps = [ln for ln in lines if "ray.scripts.scripts start" in ln or "rlrun.launch.wait_nodes" in ln]
    assert len(steps) == 4 and all('"$PYTHON" -m ' in ln for ln in steps), steps
    assert not [ln for ln in lines if ln.lstrip().startswith(("ray ", "rlrun "))]
    assert "export RAY_AUTH_MODE=token" in lines[lines.index(next(ln for ln in lines if "RAY_AUTH_TOKEN" in ln)) + 1]


def test_both_cluster_exports_refuse_the_cpu_profile():
    for what in ("slurm", "kuberay"):
        r = subprocess.run([*RLRUN, "export", what, "hardware=cpu", *K8S], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "hardware" in r.stderr and "is cpu" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not r.stdout


def test_sbatch_passes_shellcheck(tmp_path):
    for overrides in (TWO_MI300X, ["hardware=cpu"]):
        cfg, plan = _cfg_plan(overrides)
        path = tmp_path / "job.sbatch"
        path.write_text(slurm.script(cfg, plan, overrides, str(tmp_path)))
        r = subprocess.run([str(SHELLCHECK), "--shell=bash", "--severity=style", str(path)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout


def test_cli_export_slurm_keeps_export_slime_working(tmp_path):
    r = subprocess.run([*RLRUN, "export", "slurm", *TWO_MI300X, "--out", str(tmp_path / "a.sbatch")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "#SBATCH --nodes=2" in (tmp_path / "a.sbatch").read_text()
    r = subprocess.run([*RLRUN, "export", "slime", "experiment=qwen3-4b-grpo-mi300x"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "ray job submit" in r.stdout, r.stderr


# -- kuberay -------------------------------------------------------------------------------------
@pytest.mark.parametrize("hw,resource", [("h100", "nvidia.com/gpu"), ("mi300x", "amd.com/gpu")])
def test_rayjob_is_valid_against_kuberay_crd(rayjob_validator, hw, resource):
    ov = [f"hardware={hw}", "model=qwen3-4b", "cluster.num_nodes=2", "train.num_nodes=2", *K8S]
    cfg, plan = _cfg_plan(ov)
    doc = yaml.safe_load(kuberay.render(cfg, plan, ov, "/mnt/rlrun/conf"))
    errors = sorted(rayjob_validator.iter_errors(doc), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]
    spec = doc["spec"]
    workers = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert len(workers) == 1 and workers[0]["replicas"] == workers[0]["minReplicas"] == workers[0]["maxReplicas"] == 2
    worker = workers[0]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"][resource] == "8" and worker["resources"]["limits"]["cpu"] == "64"
    assert workers[0]["rayStartParams"] == {"num-gpus": "8", "num-cpus": "64"}
    head = spec["rayClusterSpec"]["headGroupSpec"]
    assert head["rayStartParams"] == {"num-gpus": "0"}
    shared = {"name": "rlrun-shared", "persistentVolumeClaim": {"claimName": "rl-shared"}}
    for pod, gpu in ((head["template"], False), (workers[0]["template"], True)):
        # GPU pods: /dev/shm memory-backed (the container default is 64 MiB; NCCL and SGLang need more)
        assert pod["spec"]["volumes"] == [shared] + gpu * [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
        c = pod["spec"]["containers"][0]
        assert c["image"] == "registry.example/rlrun:0.1.0"
        assert c["volumeMounts"] == ([{"name": "rlrun-shared", "mountPath": "/mnt/rlrun"}]
                                     + gpu * [{"name": "dshm", "mountPath": "/dev/shm"}])
        env = {e["name"]: e["value"] for e in c["env"]}
        assert env == {k: str(v) for k, v in {**cfg.hardware.env, **plan.env}.items()}
    assert spec["entrypoint"] == ("cd /mnt/rlrun && rlrun run " + " ".join(ov) +
                                  " cluster.address=auto --config-dir /mnt/rlrun/conf")


def test_strict_crd_check_can_fail(rayjob_validator):
    cfg, plan = _cfg_plan(["hardware=h100", *K8S])
    doc = kuberay.manifest(cfg, plan, [], None)
    doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replica"] = 2        # misspelled
    doc["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-gpus"] = 0  # not a string
    paths = sorted(".".join(map(str, e.absolute_path)) for e in rayjob_validator.iter_errors(doc))
    assert paths == ["spec.rayClusterSpec.headGroupSpec.rayStartParams.num-gpus",
                     "spec.rayClusterSpec.workerGroupSpecs.0"], paths


def test_rayjob_export_reports_every_missing_setting():
    cfg, plan = _cfg_plan(["hardware=cpu", "run.output_dir=/data/out"])
    with pytest.raises(ConfigError) as err:
        kuberay.manifest(cfg, plan, [], None)
    assert [p.path for p in err.value.problems] == ["cluster.kuberay.image", "cluster.kuberay.pvc",
                                                     "run.output_dir", "hardware"]
    cfg, plan = _cfg_plan(["hardware=h100", *K8S, "data.prompt_data=/data/train.jsonl", "checkpoint.hf=/models/qwen3",
                           "checkpoint.load=/mnt/rlrun/ckpt", "checkpoint.save=ckpt"])
    with pytest.raises(ConfigError) as err:  # data and checkpoints the pods read: on the volume, or relative to it
        kuberay.manifest(cfg, plan, [], None)
    assert [(p.path, p.value) for p in err.value.problems] == [("data.prompt_data", "/data/train.jsonl"),
                                                                ("checkpoint.hf", "/models/qwen3")]
    r = subprocess.run([*RLRUN, "export", "kuberay", "hardware=h100"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "cluster.kuberay.image" in r.stderr and "Traceback" not in r.stderr


def test_rayjob_export_lists_every_path_problem_at_once_and_accepts_the_images_folders():
    ckpt = ["checkpoint.hf=/models/qwen3", "checkpoint.load=/ckpt/run", "checkpoint.save=/ckpt/run"]
    cfg, plan = _cfg_plan(["hardware=h100", *K8S, "data.prompt_data=/data/train.jsonl", *ckpt])
    with pytest.raises(ConfigError) as err:  # save = load (slime's --load/--save): both, not save after load is fixed
        kuberay.manifest(cfg, plan, [], None)
    problems = err.value.problems
    assert [(p.path, p.value) for p in problems] == [("data.prompt_data", "/data/train.jsonl"),
                                                      ("checkpoint.hf", "/models/qwen3"), ("checkpoint.load", "/ckpt/run"),
                                                      ("checkpoint.save", "/ckpt/run")]  # (ref follows hf: not listed)
    assert "(the same path as checkpoint.load)" in problems[3].message
    assert "cluster.kuberay.image_paths" in problems[1].fix and "image_paths" not in problems[3].fix
    cfg, plan = _cfg_plan(["hardware=h100", *K8S, "data.prompt_data=/data/train.jsonl", *ckpt,
                           "cluster.kuberay.image_paths=[/models,/data,/ckpt]"])
    with pytest.raises(ConfigError) as err:  # the image holds the data and the weights; a save there would be lost
        kuberay.manifest(cfg, plan, [], None)
    assert [p.path for p in err.value.problems] == ["checkpoint.save"], err.value.problems
    assert "lose what they write there" in err.value.problems[0].message
    cfg, plan = _cfg_plan(["hardware=h100", *K8S, "data.prompt_data=/data/train.jsonl", *ckpt[:2],
                           "checkpoint.save=/mnt/rlrun/ckpt", "cluster.kuberay.image_paths=[/models,/data,/ckpt]"])
    assert kuberay.manifest(cfg, plan, [], None)["kind"] == "RayJob"
    with pytest.raises(ConfigError, match="cluster.kuberay.image_paths.0"):  # folders in the image: absolute
        load(["cluster.kuberay.image_paths=[models]"])


# -- submit: preparation and the live-cluster check ---------------------------------------------
def test_submit_prepares_entrypoint_runtime_env_and_refuses_a_config_dir_outside(tmp_path):
    from rlrun.launch.jobs import EXCLUDES, SubmitError, prepare

    (tmp_path / "conf").mkdir()
    cfg = load(["run.name=exp1"])
    sub = prepare(cfg, ["rollout.num_rollout=2", "cluster.address=1.2.3.4:6379"], str(tmp_path / "conf"),
                  str(tmp_path), tmp_path / "stage", now=0.0)
    # the cluster's python runs the shipped rlrun: no `rlrun` script on the head's PATH is needed
    assert sub.entrypoint == "python -m rlrun.cli run rollout.num_rollout=2 cluster.address=auto --config-dir conf"
    assert sub.runtime_env["working_dir"] == str(tmp_path) and sub.runtime_env["excludes"] == EXCLUDES
    assert sub.runtime_env["py_modules"] == [str(tmp_path / "stage" / "rlrun")]
    shipped = tmp_path / "stage" / "rlrun"
    assert (shipped / "cli.py").is_file() and (shipped / "conf" / "config.yaml").is_file()
    assert not list(shipped.rglob("__pycache__"))
    assert "outputs/" in EXCLUDES
    assert sub.submission_id == "rlrun-exp1-19700101-000000"
    assert sub.run_dir.startswith("outputs/exp1/<timestamp> (relative to the job's working dir")
    with pytest.raises(SubmitError, match="outside the working dir"):
        prepare(cfg, [], "/", str(tmp_path), tmp_path / "stage2")


def test_the_shipped_copy_composes_from_its_own_conf(tmp_path):
    """rlrun.config.compose finds the conf/ inside the shipped package first (the job has no checkout)."""
    from rlrun.launch.jobs import ship

    shipped = ship(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RLRUN_CONF_DIR")}
    r = subprocess.run([sys.executable, "-c", "import rlrun.config.compose as c; print(c.__file__, c.CONF_DIR)"],
                       cwd=tmp_path, env={**env, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True,
                       timeout=60)
    assert r.stdout.split() == [f"{shipped}/config/compose.py", f"{shipped}/conf"], r.stdout + r.stderr


def test_accelerator_type_must_match_the_hardware_profile():
    from rlrun.launch.cluster import NodeResources, ResourceError, check_accelerator

    def nodes(acc):
        return [NodeResources("n1", "10.0.0.1", 64, 8, acc), NodeResources("head", "10.0.0.2", 8, 0, None)]

    assert check_accelerator("h100", "cuda", nodes("H100")) is None
    assert check_accelerator("mi300x", "rocm", nodes("AMD-Instinct-MI300X-OAM")) is None
    with pytest.raises(ResourceError, match=r"hardware=h100 does not match .* \['AMD-Instinct-MI300X-OAM'\]"):
        check_accelerator("h100", "cuda", nodes("AMD-Instinct-MI300X-OAM"))
    assert "checked by GPU counts only" in check_accelerator("h100", "cuda", nodes(None))
    assert check_accelerator("cpu", "cpu", nodes(None)) is None


def test_exports_import_neither_torch_nor_ray(tmp_path):
    code = ("import sys, json; from rlrun.cli import main; "
            f"rcs = [main(['export', w, 'hardware=h100', *{K8S!r}, '--out', {str(tmp_path / 'x')!r}]) "
            "for w in ('slurm', 'kuberay')]; "
            "print(json.dumps({'rc': rcs, 'torch': 'torch' in sys.modules, 'ray': 'ray' in sys.modules}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"rc": [0, 0], "torch": False, "ray": False}, r.stderr


def test_cluster_commands_refuse_sweeps_and_a_missing_address(monkeypatch, capsys):
    from rlrun.cli import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["submit", "-m", "optim.lr=1e-6,2e-6", "--address", "http://h:8265"]) == 2
    assert main(["export", "kuberay", "-m", "optim.lr=1e-6,2e-6"]) == 2
    assert main(["jobs"]) == 2
    assert main(["stop"]) == 2  # needs a job id
    err = capsys.readouterr().err
    assert "not a sweep" in err and "no Ray cluster given" in err and "takes one job id" in err
