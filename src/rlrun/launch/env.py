"""Environment variables for every trainer and engine actor.

The hardware profile (conf/hardware/*.yaml, ``hardware.env``) is the source of the vendor lists
(e.g. ``HIP_VISIBLE_DEVICES`` on MI300X); the plan may add derived values. On top of those, Ray
must be told not to rewrite ``*_VISIBLE_DEVICES`` per actor: trainer ranks and engines share
bundles (colocate) and an engine with ``gpus_per_engine > 1`` addresses GPUs outside its own
bundle, so every actor must see all the GPUs of its node and pick its device by id.
"""
from __future__ import annotations

from collections.abc import Mapping

# Flags every GPU actor needs (docs/runner.md "Env."; https://docs.ray.io/en/latest/ray-core/scheduling/accelerators.html).
# Ray reads the NOSET flags from the actor's runtime env, so they must be in the env passed at actor creation,
# not set later.
_GPU_BASE_ENV = {
    "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
    "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES": "1",
    "RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES": "1",
    # NCCL's cuMem allocator breaks CUDA-IPC weight sharing between colocated processes.
    "NCCL_CUMEM_ENABLE": "0",
    # Megatron/TE order kernels on one stream; more connections reorder comm and compute.
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
}

# On the CPU profile several actors share two cores: each one gets threads explicitly in
# its constructor, and tokenizers must not fork a pool of their own in every actor.
_CPU_BASE_ENV = {"TOKENIZERS_PARALLELISM": "false"}


def actor_env(vendor: str, hardware_env: Mapping[str, object], plan_env: Mapping[str, object] | None = None) -> dict[str, str]:
    """Env for an actor: base flags for the vendor, then hardware.env, then the plan's env.

    Later sources win, so a profile can override a base flag (e.g. turn NCCL_CUMEM_ENABLE on).
    Values are stringified because Ray's runtime_env only accepts strings.
    """
    if vendor not in ("cpu", "cuda", "rocm"):
        raise ValueError(f"hardware.vendor={vendor!r} is not one of cpu|cuda|rocm (conf/hardware/*.yaml)")
    env: dict[str, str] = dict(_CPU_BASE_ENV)
    if vendor != "cpu":
        env.update(_GPU_BASE_ENV)
    for source in (hardware_env, plan_env or {}):
        env.update({str(k): str(v) for k, v in source.items()})
    return env


# The visible-devices variables Ray's accelerator managers read, in the order they are looked at.
VISIBLE_DEVICES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
NOSET_ENV = {k: v for k, v in _GPU_BASE_ENV.items() if k.startswith("RAY_EXPERIMENTAL_NOSET_")}


def local_gpu_index(ray_id: str | int, env: Mapping[str, str]) -> int:
    """The index by which a process that sees its node's whole device list (every rlrun GPU actor: NOSET above)
    addresses the GPU Ray calls `ray_id`. Ray names a GPU by its entry in the visible-devices variable the node was
    started with: on a node started with CUDA_VISIBLE_DEVICES=2,3 Ray's GPU "3" is torch's cuda:1 and SGLang's
    --base-gpu-id 1 (an unset variable: Ray's id is the index)."""
    for name in VISIBLE_DEVICES:
        ids = [v.strip() for v in (env.get(name) or "").split(",") if v.strip()]
        if ids:
            if str(ray_id) not in ids:
                raise ValueError(f"Ray gave GPU {ray_id}, which is not in {name}={env[name]} of its node")
            return ids.index(str(ray_id))
    return int(ray_id)


def runtime_env(env: Mapping[str, str]) -> dict:
    """Ray runtime_env carrying `env` to an actor."""
    return {"env_vars": dict(env)}
