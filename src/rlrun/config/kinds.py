"""Component kinds: the rollout engines, trainer backends and advantage estimators a config may name, each a
spec in a registry. The schema's allowed values, the rules, the memory model, weight sync, the loops and
the backends read a kind's spec, never its name, so that a new kind is one entry here plus its own module
(the factory is an import path, resolved only when a run builds it). Pure Python: imports no rlrun package,
no torch and no ray (`rlrun plan` reads it). Kinds registered at run time (a plugin, a test) are seen by
everything that reads the registries: nothing copies their names.

    from rlrun.config.kinds import ENGINES, BACKENDS, ESTIMATORS
    ENGINES["sglang"].needs_gpu                     # True
    ESTIMATORS.register(EstimatorKind("my_est", group_normalised=True))
"""
from __future__ import annotations

import importlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Iterator, Mapping, TypeVar

K = TypeVar("K")


class Kinds(Generic[K]):
    """Name -> spec, in registration order. `what` is the config key that names a kind (for errors)."""

    def __init__(self, what: str):
        self.what = what
        self._specs: dict[str, K] = {}

    def register(self, spec: K) -> K:
        name = spec.name  # type: ignore[attr-defined]
        if name in self._specs:
            raise ValueError(f"{self.what}: kind {name!r} is registered twice")
        self._specs[name] = spec
        return spec

    def unregister(self, name: str) -> None:
        self._specs.pop(name, None)

    @contextmanager
    def registered(self, spec: K) -> Iterator[K]:
        """Register `spec` for the duration of a block (tests, plugins tried out)."""
        self.register(spec)
        try:
            yield spec
        finally:
            self.unregister(spec.name)  # type: ignore[attr-defined]

    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def __getitem__(self, name: str) -> K:
        try:
            return self._specs[name]
        except KeyError:
            raise ValueError(f"{self.what}={name!r} is unknown; use one of {', '.join(self._specs)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def items(self):
        return self._specs.items()


def resolve(path: str) -> Any:
    """"package.module:attr" -> the object (a kind's factory, imported only when a run builds it)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def _one_of(spec: Any, key: str, allowed: tuple[str, ...], value: Any = None) -> None:
    """A spec's field holds a value the readers know (a typo in a plugin's spec fails where it is registered)."""
    value = getattr(spec, key) if value is None else value
    if value not in allowed:
        raise ValueError(f"{type(spec).__name__}({spec.name!r}).{key}={value!r}: use one of {', '.join(allowed)}")


# ---- rollout engines -------------------------------------------------------------------------------------

TRANSPORTS = ("tensor", "distributed", "disk")  # rollout.weight_sync's transports (besides auto)


@dataclass(frozen=True)
class EngineKind:
    name: str
    needs_gpu: bool
    # rollout.weight_sync transports the engine accepts (auto picks among them: rlrun.config.plan.weight_sync)
    weight_sync: tuple[str, ...] = TRANSPORTS
    max_gpus_per_engine: int | None = None   # None: any rollout.gpus_per_engine (tensor parallel engines)
    # one engine may span several nodes (one server process per node: SGLang's --nnodes/--node-rank)
    multi_node: bool = False
    server_args: bool = False                # reads rollout.sglang (SGLang ServerArgs); else they are refused
    server_args_check: str = ""              # "module:function"(args dict) -> Problems, run by rlrun validate
    # the engine answers a checksum of the weights it holds (a push is verified against the trainer's);
    # without it a push is verified by the weight_version every engine reports
    checksums: bool = False
    sharded_weights: bool = False            # each of the engine's GPUs takes its own copy of a push
    # memory model (rlrun.config.memory): "static_pool" = mem_fraction_static of the GPU is reserved for
    # weights + KV (SGLang); "per_sequence" = weights + the KV of the sequences it runs
    memory: str = "per_sequence"
    # "module:function"(cfg, plan, placement, env, model_dir, log_dir) -> (engines, restart(i))
    factory: str = ""
    lora: bool = False                       # serves a LoRA run (takes the merged weights at each sync)
    # Python modules it imports where it runs, each with how to install it (the preflight finds them for an
    # embedded Ray: rlrun.launch.preflight.embedded_ray)
    requires: tuple[tuple[str, str], ...] = ()
    # NCCL settings the engine's processes run with whatever their env says; every rank of an NCCL weight-sync
    # group must agree (a trainer with NCCL's cuMem allocator on and an engine with it off hang at the first
    # collective: SGLang sets NCCL_CUMEM_ENABLE=0 unless --enable-symm-mem, sglang/srt/entrypoints/engine.py)
    nccl_env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _one_of(self, "memory", ("static_pool", "per_sequence"))
        for t in self.weight_sync:
            _one_of(self, "weight_sync", TRANSPORTS, t)


ENGINES: Kinds[EngineKind] = Kinds("rollout.engine")
ENGINES.register(EngineKind("hf", needs_gpu=False, max_gpus_per_engine=1, checksums=True, lora=True,
                            memory="per_sequence", factory="rlrun.launch.engines:start_hf_engines"))
ENGINES.register(EngineKind("sglang", needs_gpu=True, server_args=True, sharded_weights=True, multi_node=True,
                            nccl_env={"NCCL_CUMEM_ENABLE": "0"},
                            server_args_check="rlrun.rollout.sglang_args:check_sglang_mapping",
                            memory="static_pool", factory="rlrun.launch.engines:start_sglang_engines",
                            requires=(("sglang", "pip install 'rlrun[sglang]' (docs/sglang.md)"),)))


# ---- trainer backends ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BackendKind:
    name: str
    needs_gpu: bool
    model_parallel: bool                     # TP/PP/CP/EP (else data parallel only)
    critic: bool                             # builds the PPO critic (estimators with needs_critic)
    state_dtypes: tuple[str, ...]            # optim.state_dtype values (Adam moments)
    bf16_grads: bool                         # train.fp32_grads=false is possible
    cuda_graphs: bool                        # train.cuda_graphs on NVIDIA GPUs
    sliding_window: bool                     # implements sliding-window attention (else context <= window)
    # bytes a checkpoint holds per parameter, by optim.state_dtype (rlrun.checkpoint's layout)
    checkpoint_bytes: Mapping[str, int] = field(default_factory=dict)
    # trainer memory per parameter (rlrun.config.memory): "fp32" = fp32 weights, grads and Adam moments
    # replicated per DP rank; "distributed" = bf16 weights, fp32/bf16 grads, fp32 master + moments over DP
    memory: str = "fp32"
    # its activation terms were checked against measured peaks (docs/benchmarks.md, "Memory"); otherwise the gate
    # refuses a config for memory only when the rest (weights, grads, optimizer, engine) already overflows
    activations_calibrated: bool = False
    factory: str = ""                        # "module:Class", the TrainerBackend subclass
    # model families it builds besides those whose rlrun.config.families entry names it (a plugin backend)
    families: tuple[str, ...] = ()
    teacher: bool = False                    # runs a distillation teacher's forward (algo.distill.where=trainer)
    lora: bool = False                       # trains a LoRA adapter (model.lora.rank > 0)
    # Python modules it imports where it runs, each with how to install it (the preflight finds them for an
    # embedded Ray: rlrun.launch.preflight.embedded_ray)
    requires: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        _one_of(self, "memory", ("fp32", "distributed"))
        for d in self.state_dtypes:
            _one_of(self, "state_dtypes", ("fp32", "bf16"), d)


BACKENDS: Kinds[BackendKind] = Kinds("train.backend")
# torch: fp32 HF weights 4 + Adam m and v 8 = 12 B/param in a checkpoint
BACKENDS.register(BackendKind("torch", needs_gpu=False, model_parallel=False, critic=True, state_dtypes=("fp32",),
                              bf16_grads=False, cuda_graphs=False, sliding_window=True,
                              checkpoint_bytes={"fp32": 12}, memory="fp32", teacher=True, lora=True,
                              factory="rlrun.train.torch_backend:TorchBackend"))
# megatron: bf16 HF weights 2 + fp32 master 4 + Adam m and v (4 + 4, or 2 + 2 with optim.state_dtype=bf16)
BACKENDS.register(BackendKind("megatron", needs_gpu=True, model_parallel=True, critic=False,
                              state_dtypes=("fp32", "bf16"), bf16_grads=True, cuda_graphs=True,
                              sliding_window=False, checkpoint_bytes={"fp32": 14, "bf16": 10},
                              memory="distributed", activations_calibrated=True, teacher=True,
                              factory="rlrun.train.megatron_backend:MegatronBackend",
                              requires=(("megatron.core", "pip install 'rlrun[megatron]' (docs/megatron.md)"),)))


# ---- advantage estimators --------------------------------------------------------------------------------

@dataclass(frozen=True)
class EstimatorKind:
    name: str
    group_normalised: bool = False           # rewards normalised within each prompt's group (needs n >= 2)
    std_normalised: bool = True              # with group_normalised: also / group std (algo.normalize_std)
    needs_critic: bool = False               # a value model (GAE): the backend must build a critic
    needs_whitening: bool = False            # algo.normalize_advantages must be on
    policy_loss: str = "ppo"                 # rlrun.algo.losses kind used by default


ESTIMATORS: Kinds[EstimatorKind] = Kinds("algo.advantage_estimator")
ESTIMATORS.register(EstimatorKind("grpo", group_normalised=True))
ESTIMATORS.register(EstimatorKind("gspo", group_normalised=True, policy_loss="gspo"))
ESTIMATORS.register(EstimatorKind("cispo", group_normalised=True, policy_loss="cispo"))
ESTIMATORS.register(EstimatorKind("reinforce_plus_plus", needs_whitening=True))
ESTIMATORS.register(EstimatorKind("reinforce_plus_plus_baseline", group_normalised=True, std_normalised=False,
                                  needs_whitening=True))
ESTIMATORS.register(EstimatorKind("ppo", needs_critic=True))


# ---- loss types (algo.loss_type; slime --loss-type) ------------------------------------------------------

@dataclass(frozen=True)
class LossKind:
    name: str
    needs_rollout: bool = True       # samples come from the engines (False: from the dataset, no engines at all)
    needs_advantages: bool = True    # the loop computes advantages from rewards (slime
                                     # --disable-compute-advantages-and-returns is the False case)


LOSS_TYPES: Kinds[LossKind] = Kinds("algo.loss_type")
LOSS_TYPES.register(LossKind("policy_loss"))
# SFT: -log p of the dataset's response tokens (slime sft_loss_function); trainer only (slime --debug-train-only)
LOSS_TYPES.register(LossKind("sft_loss", needs_rollout=False, needs_advantages=False))


def needs_rollout(cfg: Any) -> bool:
    """Whether the run generates with engines: the one place "this loss trains on a dataset only" is decided."""
    return LOSS_TYPES[cfg.algo.loss_type].needs_rollout


def builds(backend: str, family: str, family_backends: tuple[str, ...]) -> bool:
    """Whether train.backend `backend` builds model family `family` (whose registry entry lists
    `family_backends`)."""
    return backend in family_backends or family in BACKENDS[backend].families


def use_teacher(cfg: Any) -> bool:
    """Whether the run distils from a teacher (algo.distill.teacher set): the one place it is decided."""
    return cfg.algo.distill.teacher is not None


def use_critic(cfg: Any) -> bool:
    """Whether the run trains a critic: the one place "this estimator needs a value model" is decided."""
    return ESTIMATORS[cfg.algo.advantage_estimator].needs_critic
