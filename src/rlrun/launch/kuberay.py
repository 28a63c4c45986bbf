"""`rlrun export kuberay`: a KubeRay RayJob (ray.io/v1) that creates a Ray cluster for the plan and runs the job.

    head:    a CPU-only pod (Ray's driver, the router): no GPU work is scheduled on it
    workers: one group of plan.num_nodes pods, each with hardware.gpus_per_node GPUs of the vendor's
             resource (nvidia.com/gpu or amd.com/gpu) and cluster.cpus_per_node / memory_per_node
    storage: the PVC cluster.kuberay.pvc mounted at cluster.kuberay.mount_path on every pod; the
             entrypoint runs there, so a relative run.output_dir (run dirs, checkpoints, disk weight
             sync) lands on the shared volume; absolute data/checkpoint paths must lie under it
             (PATH_KEYS) or under a folder the image holds (cluster.kuberay.image_paths); GPU pods get a
             memory-backed /dev/shm (SHM)
    env:     hardware.env and the plan's env in every container

Checked field by field against KubeRay v1.7.0's RayJob CRD (tests/unit/test_cluster_export.py).
Imports neither torch nor ray.
"""
from __future__ import annotations

import re
import shlex
from importlib import metadata
from pathlib import PurePosixPath

import yaml

from rlrun.config.errors import ConfigError, Problem

GPU_RESOURCE = {"cuda": "nvidia.com/gpu", "rocm": "amd.com/gpu"}
HEAD_RESOURCES = {"cpu": "4", "memory": "16Gi"}  # the head runs the driver and the router, not the model
VOLUME = "rlrun-shared"
# /dev/shm of a container is 64 MiB unless a volume replaces it; NCCL's shared-memory transport and
# SGLang's tensor-parallel workers need far more (their docs run Docker with --shm-size / --ipc=host).
# A memory-backed emptyDir counts against the pod's memory limit.
SHM = ("dshm", "/dev/shm")
# every config key whose value the pods read as a file path (absolute ones must be on the volume)
PATH_KEYS = ("data.prompt_data", "checkpoint.hf", "checkpoint.ref", "checkpoint.load", "checkpoint.save")
WRITTEN_KEYS = ("checkpoint.save",)  # written by the pods: on the volume only
DERIVED = {"checkpoint.ref": "checkpoint.hf"}  # a key whose null takes another key's path (rlrun.config.derive)
TTL_AFTER_FINISHED_S = 600  # keep the finished cluster's pods 10 minutes for `kubectl logs`


def _problems(cfg) -> list[Problem]:
    k = cfg.cluster.kuberay
    out = []
    if not k.image:
        out.append(Problem("cluster.kuberay.image", "is null; the RayJob's pods need an image with rlrun installed",
                           "set cluster.kuberay.image=REGISTRY/IMAGE:TAG", None))
    if not k.pvc:
        out.append(Problem("cluster.kuberay.pvc", "is null; checkpoints and disk weight sync need storage every pod "
                           "shares", "set cluster.kuberay.pvc to a ReadWriteMany PersistentVolumeClaim's name", None))
    out_dir = PurePosixPath(cfg.run.output_dir)
    if out_dir.is_absolute() and not out_dir.is_relative_to(k.mount_path):
        out.append(Problem("run.output_dir", f"is outside the shared volume mounted at {k.mount_path}, so the run "
                           "dir would live on one pod's disk", f"use a relative path or one under {k.mount_path}",
                           cfg.run.output_dir))
    out += _path_problems(cfg)
    if cfg.hardware.vendor == "cpu":
        out.append(Problem("hardware", "is cpu; the RayJob export is for GPU node pools",
                           "choose a GPU profile, e.g. hardware=h100 or hardware=mi300x", cfg.hardware.name))
    return out


def _path_problems(cfg) -> list[Problem]:
    """Every absolute path the pods read or write that is neither on the volume nor in the image
    (cluster.kuberay.image_paths): all of them at once, also a key whose path another key already named
    (checkpoint.save = checkpoint.load, as slime's scripts set them; checkpoint.ref derived from checkpoint.hf)."""
    k = cfg.cluster.kuberay
    paths = [(key, _get(cfg, key)) for key in PATH_KEYS]
    paths += [(f"eval.datasets[{i}].path", d.path) for i, d in enumerate(cfg.eval.datasets)]
    out, first = [], {}
    for key, value in paths:
        written = key in WRITTEN_KEYS  # a path the pods write must be on the volume, whatever the image holds
        held = [k.mount_path, *([] if written else k.image_paths)]
        if not value or not PurePosixPath(value).is_absolute() or any(PurePosixPath(value).is_relative_to(h)
                                                                      for h in held):
            continue
        if DERIVED.get(key) and first.get(value) == DERIVED[key]:
            continue  # checkpoint.ref=null follows checkpoint.hf: fixing that fixes both
        same = f" (the same path as {first[value]})" if value in first else ""
        first.setdefault(value, key)
        where = f"the shared volume mounted at {k.mount_path}" + (
            f" and the image's folders {list(k.image_paths)}" if k.image_paths and not written else "")
        fix = f"put it on the volume (under {k.mount_path}) or use a path relative to {k.mount_path} (the entrypoint " \
              "runs there)"
        out.append(Problem(key, f"is outside {where}{same}: the pods would " + ("lose what they write there" if written
                                                                                  else "not see it"),
                           fix + ("" if written else "; if the image holds it, add its folder to "
                                                    "cluster.kuberay.image_paths"), value))
    return out


def _get(cfg, dotted: str):
    obj = cfg
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _name(run_name: str) -> str:
    """A DNS-1123 label from the run name (KubeRay appends suffixes to it, so keep it short)."""
    return ("rlrun-" + re.sub(r"[^a-z0-9-]+", "-", run_name.lower())).strip("-")[:40].rstrip("-")


def _pod(cfg, env: dict[str, str], container: str, resources: dict, shm: bool = False) -> dict:
    k = cfg.cluster.kuberay
    pod = {"spec": {
        "containers": [{
            "name": container, "image": k.image,
            "env": [{"name": n, "value": str(v)} for n, v in sorted(env.items())],
            "resources": {"requests": dict(resources), "limits": dict(resources)},
            "volumeMounts": [{"name": VOLUME, "mountPath": k.mount_path}],
        }],
        "volumes": [{"name": VOLUME, "persistentVolumeClaim": {"claimName": k.pvc}}],
    }}
    if shm:  # GPU pods: a memory-backed /dev/shm (SHM)
        pod["spec"]["containers"][0]["volumeMounts"].append({"name": SHM[0], "mountPath": SHM[1]})
        pod["spec"]["volumes"].append({"name": SHM[0], "emptyDir": {"medium": "Memory"}})
    return pod


def manifest(cfg, plan, overrides: list[str], config_dir: str | None) -> dict:
    problems = _problems(cfg)
    if problems:
        raise ConfigError(problems)
    c, k = cfg.cluster, cfg.cluster.kuberay
    gpus = plan.gpus_per_node
    env = {**cfg.hardware.env, **plan.env}
    run = ["rlrun", "run", *(o for o in overrides if not o.startswith("cluster.address=")), "cluster.address=auto"]
    if config_dir:
        run += ["--config-dir", config_dir]  # a path in the image or on the volume
    worker = {"cpu": str(c.cpus_per_node), "memory": k.memory_per_node, GPU_RESOURCE[cfg.hardware.vendor]: str(gpus)}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": _name(cfg.run.name), "namespace": k.namespace,
                     "labels": {"app.kubernetes.io/created-by": "rlrun"}},
        "spec": {
            "entrypoint": f"cd {shlex.quote(k.mount_path)} && {shlex.join(run)}",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
            "rayClusterSpec": {
                "rayVersion": metadata.version("ray"),
                "headGroupSpec": {
                    "rayStartParams": {"num-gpus": "0"},
                    "template": _pod(cfg, env, "ray-head", HEAD_RESOURCES),
                },
                "workerGroupSpecs": [{
                    "groupName": "gpu",
                    "replicas": plan.num_nodes, "minReplicas": plan.num_nodes, "maxReplicas": plan.num_nodes,
                    "rayStartParams": {"num-gpus": str(gpus), "num-cpus": str(c.cpus_per_node)},
                    "template": _pod(cfg, env, "ray-worker", worker, shm=True),
                }],
            },
        },
    }


def render(cfg, plan, overrides: list[str], config_dir: str | None) -> str:
    return (f"# Generated by `rlrun export kuberay` for run {cfg.run.name} (docs/cluster.md): KubeRay RayJob ray.io/v1,\n"
            f"# checked against KubeRay v1.7.0's CRD. Plan: {plan.num_nodes} node(s) x {plan.gpus_per_node} GPU(s).\n"
            + yaml.safe_dump(manifest(cfg, plan, overrides, config_dir), sort_keys=False))
