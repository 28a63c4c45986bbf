"""Component kinds: the rollout engines, routers, trainer backends and advantage estimators a config may name,
each a spec in a registry. The schema's allowed values, the rules, the memory model, weight sync, the loops and
the backends read a kind's spec, never its name, so that a new kind is one entry here plus its own module
(the factory is an import path, resolved only when a run builds it). Pure Python: imports no rlrun package,
no torch and no ray (`rlrun plan` reads it). Kinds registered at run time (a plugin, a test) are seen by
everything that reads the registries: nothing copies their names.

    from rlrun.config.kinds import ENGINES, BACKENDS, ESTIMATORS
    ENGINES["hf"].needs_gpu                         # False
    ESTIMATORS.register(EstimatorKind("my_est", group_normalised=True))
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.util import find_spec
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, TypeVar

K = TypeVar("K")


class Kinds(Generic[K]):
    """Name -> spec: the built-in kinds in discovery order (plugin_modules(), whichever module was imported first),
    then the others (plugins, tests) in registration order. `what` is the config key that names a kind (for
    errors)."""

    def __init__(self, what: str):
        self.what = what
        self._specs: dict[str, K] = {}
        self._by: dict[str, str] = {}  # name -> the module that registered it

    def register(self, spec: K) -> K:
        name = spec.name  # type: ignore[attr-defined]
        if name in self._specs:
            raise ValueError(f"{self.what}: kind {name!r} is registered twice")
        self._specs[name] = spec
        self._by[name] = sys._getframe(1).f_globals.get("__name__", "")
        return spec

    def unregister(self, name: str) -> None:
        self._specs.pop(name, None)
        self._by.pop(name, None)

    def _ordered(self) -> dict[str, K]:
        discover()
        seq = {name: i for i, name in enumerate(self._specs)}
        rank = {name: _PLUGIN_RANK.get(self._by.get(name, ""), len(_PLUGIN_RANK)) for name in self._specs}
        return {name: self._specs[name] for name in sorted(self._specs, key=lambda n: (rank[n], seq[n]))}

    @contextmanager
    def registered(self, spec: K) -> Iterator[K]:
        """Register `spec` for the duration of a block (tests, plugins tried out)."""
        self.register(spec)
        try:
            yield spec
        finally:
            self.unregister(spec.name)  # type: ignore[attr-defined]

    def names(self) -> tuple[str, ...]:
        return tuple(self._ordered())

    def __getitem__(self, name: str) -> K:
        discover()
        try:
            return self._specs[name]
        except KeyError:
            raise ValueError(f"{self.what}={name!r} is unknown; use one of {', '.join(self.names())}") from None

    def __contains__(self, name: object) -> bool:
        discover()
        return name in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(self._ordered())

    def __len__(self) -> int:
        discover()
        return len(self._specs)

    def items(self):
        return self._ordered().items()

    def values(self):
        return self._ordered().values()


# ---- discovery -------------------------------------------------------------------------------------------
# The one mechanism that finds the kinds and rules outside this package: modules that register theirs (ENGINES,
# TRANSPORTS, REWARDS, @RULES, ...) when imported, imported by every registry on its first use, so that config
# imports no other rlrun package yet sees every kind. Each must import no torch and no ray (`rlrun plan` reads
# them). KIND_PACKAGES are searched: every module of a package whose value is "" (a transport is one module
# there), the named module of every subpackage otherwise (an engine kind is one package with its spec.py);
# PLUGINS are named. tests/unit/test_discovery.py imports every module and resolves every path a spec holds.
KIND_PACKAGES: dict[str, str] = {"rlrun.rollout.transports": "", "rlrun.rollout.engines": "spec",
                                 "rlrun.rollout.routers": "spec"}
PLUGINS: list[str] = [
    "rlrun.reward.spec",
    # rule modules (@RULES): config's own and the packages above it
    "rlrun.config.rules", "rlrun.config.layout_rules", "rlrun.config.hfcheck", "rlrun.config.debug_rules",
    "rlrun.config.check_rules", "rlrun.config.mode_rules", "rlrun.config.mtp_rules", "rlrun.config.reward_rules",
    "rlrun.agent.rules",
]
_discovered: list[bool] = [False]
_PLUGIN_RANK: dict[str, int] = {}  # plugin module -> its place in discovery (Registry's order of the built-ins)


def plugin_modules() -> list[str]:
    """Every module discovery imports, in order: the kind packages' modules (sorted by name), then PLUGINS."""
    found = []
    for package, module in KIND_PACKAGES.items():
        where = find_spec(package)
        for m in sorted(pkgutil.iter_modules(where.submodule_search_locations if where else []),
                        key=lambda m: m.name):
            if not module and not m.ispkg:
                found.append(f"{package}.{m.name}")
            elif module and m.ispkg and find_spec(f"{package}.{m.name}.{module}") is not None:
                found.append(f"{package}.{m.name}.{module}")
    return found + PLUGINS


def discover() -> None:
    """Import the plugin modules once (each registers its kinds and rules)."""
    if _discovered[0]:
        return
    _discovered[0] = True
    modules = plugin_modules()
    _PLUGIN_RANK.update({name: i for i, name in enumerate(modules)})
    for name in modules:
        importlib.import_module(name)


def resolve(path: Any) -> Any:
    """"package.module:attr" -> the object (a kind's start, backend class, token rule, policy loss: imported only
    when a run uses it, so that config imports no other rlrun package). The one way a spec names code; a spec may
    also hold the object itself (a kind registered at run time by code that has it)."""
    if not isinstance(path, str):
        return path
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def paths(spec: Any) -> dict[str, str]:
    """The "module:attr" fields of a spec (tests/unit/test_discovery.py resolves every one)."""
    return {k: v for k, v in vars(spec).items() if isinstance(v, str) and ":" in v and "." in v.partition(":")[0]}


def _one_of(spec: Any, key: str, allowed: tuple[str, ...], value: Any = None) -> None:
    """A spec's field holds a value the readers know (a typo in a plugin's spec fails where it is registered)."""
    value = getattr(spec, key) if value is None else value
    if value not in allowed:
        raise ValueError(f"{type(spec).__name__}({spec.name!r}).{key}={value!r}: use one of {', '.join(allowed)}")


# ---- rollout engines -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TransportKind:
    """A weight transport (rollout.weight_sync): one module of rlrun.rollout.transports owns both ends and
    registers this spec. The plan picks it (`auto`), the rules ask it (`rules`), the weight sync part
    drives it (rlrun.parts.weight_sync), the trainer's lead rank runs its push (rlrun.launch.train_group)."""
    name: str
    # rollout.weight_sync=auto picks the first registered transport whose auto(cfg) is true
    auto: Callable[[Any], bool]
    # its plan rule: cfg -> Problems (run by rlrun validate when the run's transport is this one)
    rules: Callable[[Any], Iterable[Any]]
    # "fingerprint": the trainer pushes from its memory and fingerprints what it sent (rlrun.rollout.weights);
    # "sha256": the trainer writes a file first (its sha256 is the check) and the engines load it
    check: str = "fingerprint"
    # trainer end (runs on the lead trainer rank; gathered: on the ranks on each engine's GPUs): (named, urls,
    # version=, bucket_bytes=, prepare=, copies=, backend=, resume=, timeout_s=, engine_env=, flush_cache=, keep=,
    # flattened=, phases=, and exchange= when gathered) -> bytes pushed per engine (named:
    # the state as a rlrun.rollout.weights.Buckets stream, each bucket made when it is asked for: W.as_buckets, then
    # prepare(bucket); keep: a dict the transport keeps across the rank's pushes, e.g. its process group; flattened:
    # the engines read a bucket as one buffer: TransportKind.flattened of the engine kind; phases: a dict the push
    # adds its seconds per phase to, rlrun.rollout.engines.group.Phases); None: a file transport
    push: Callable[..., int] | None = None
    # whether an engine kind (EngineKind) reads this transport's pushes as flattened buckets
    flattened: Callable[[Any], bool] = lambda kind: False
    # a push gathered per engine from the trainer ranks on its GPUs: (trainer rank -> its plan slots, engine -> its
    # slots, payloads per request) -> engine -> the trainer ranks in its TP order, its sender first, or None where a
    # GPU of the engine holds no trainer rank (rlrun.rollout.transports.tensor.engine_ranks); the push then takes
    # exchange= (rlrun.rollout.engines.group.push_tensors). None: the lead rank alone pushes to every engine
    gathered: Callable[[dict, dict, int], dict] | None = None
    # file transports: the trainer end (state, dir, keep, **args) writing the file(s) (keep: a dict the lead rank
    # keeps across its writes, e.g. the snapshot a delta diffs against), and the engine end (engines, dir, version,
    # urls, **args) making each engine at urls load it (rlrun.rollout.engines.group.EngineGroup) and returning the
    # push's metrics for the step's row, or None; args: file_args
    write: Callable[..., None] | None = None
    receive: Callable[..., dict | None] | None = None
    # a file transport's settings from the run's config: (cfg, run_dir) -> keyword arguments of write and receive
    file_args: Callable[[Any, Any], dict] = field(default=lambda cfg, run_dir: {})
    # what `rlrun plan` says of it besides its name (cfg -> a line; "" for nothing): e.g. a delta's encoding
    describe: Callable[[Any], str] = field(default=lambda cfg: "")
    # its settings' rule when the run's transport is another (cfg -> Problems: a setting of its own that is set
    # would be ignored); None: it has no settings of its own
    idle: Callable[[Any], Iterable[Any]] | None = None
    # its metrics for the step's row: (bytes per engine, seconds) -> {name: value}
    metrics: Callable[[int, float], dict] = field(default=lambda nbytes, seconds: {})

    @property
    def file(self) -> bool:
        return self.push is None

    def __post_init__(self) -> None:
        _one_of(self, "check", ("fingerprint", "sha256"))
        if (self.push is None) == (self.write is None or self.receive is None):
            raise ValueError(f"TransportKind({self.name!r}): give push (from the trainer's memory) or write + "
                             "receive (a file), not both")


TRANSPORTS: Kinds[TransportKind] = Kinds("rollout.weight_sync")


def auto_transport(cfg: Any) -> str:
    """The transport rollout.weight_sync=auto picks for cfg's layout: the first registered whose auto(cfg) holds."""
    return next(t.name for t in TRANSPORTS.values() if t.auto(cfg))


def chosen_transport(cfg: Any) -> str:
    """The weight-sync transport a run gets: rollout.weight_sync, or auto_transport's pick for auto."""
    return cfg.rollout.weight_sync if cfg.rollout.weight_sync != "auto" else auto_transport(cfg)


@dataclass(frozen=True)
class EngineKind:
    """A rollout engine kind: one package rlrun.rollout.engines.<kind>/ whose pure spec.py registers this (its
    arguments, rules and capabilities) and whose engine.py holds its Ray actor and RolloutEngine adapter
    (rlrun.rollout.engines.protocol)."""
    name: str
    needs_gpu: bool
    # rollout.weight_sync transports the engine accepts (None: every registered one; rlrun.config.plan.weight_sync)
    weight_sync: tuple[str, ...] | None = None
    max_gpus_per_engine: int | None = None   # None: any rollout.gpus_per_engine (tensor parallel engines)
    # one engine may span several nodes (one server process per node)
    multi_node: bool = False
    # its own arguments: the rollout key that holds them (free-form, passed through to the engine; another kind
    # refuses them) and their check (args dict -> Problems, run by rlrun validate); "": it takes none
    args_key: str = ""
    args_check: Callable[[dict], Iterable[Any]] | None = None
    # args dict -> [(argument, Python module, the fix: install it or ...)]: modules one of its arguments makes it
    # import where it runs (e.g. SGLang's moe_a2a_backend=deepep: deep_ep), found by the preflight as `requires` is
    args_requires: Callable[[dict], Iterable[tuple[str, str, str]]] | None = None
    rules: Callable[[Any], Iterable[Any]] | None = None  # its plan rules (cfg -> Problems) when it is the engine
    # the engine answers a checksum of the weights it holds (a push is verified against the trainer's);
    # without it a push is verified by the weight_version every engine reports
    checksums: bool = False
    sharded_weights: bool = False            # each of the engine's GPUs takes its own copy of a push
    # it reads a pushed bucket as one flat buffer plus metadata (SGLang's load_format="flattened_bucket"): one IPC
    # handle per bucket in /update_weights_from_tensor (flattened_ipc), one broadcast per bucket in
    # /update_weights_from_distributed (flattened_broadcast), instead of one per tensor. Set only where verified
    # against the real engine (docs/rollout.md); each transport reads the one it sends (TransportKind.flattened)
    flattened_ipc: bool = False
    flattened_broadcast: bool = False
    # memory model (rlrun.config.memory): "static_pool" = mem_fraction_static of the GPU is reserved for
    # weights + KV; "per_sequence" = weights + the KV of the sequences it runs
    memory: str = "per_sequence"
    # "module:function"(cfg, plan, placement, runtime_env, model_dir, log_dir) -> (engines, restart(i))
    # (rlrun.rollout.engines.protocol), imported when a run starts its engines
    start: str = ""
    packages: tuple[str, ...] = ()           # its distributions, recorded in a run dir's versions.json
    lora: bool = False                       # serves a LoRA run (takes the merged weights at each sync)
    # serves a reward engine (reward.model): /generate answers SGLang's token_ids_logprob (a discriminative judge's
    # next-token probability) besides text (a generative judge's judgement)
    judge: bool = False
    # answers SGLang's logprob_start_len with meta_info.input_token_logprobs (a served distillation teacher scores
    # the student's tokens as its prompt: algo.distill.where=engine)
    prompt_logprobs: bool = False
    # Python modules it imports where it runs, each with how to install it (the preflight finds them for an
    # embedded Ray: rlrun.launch.preflight.embedded_ray)
    requires: tuple[tuple[str, str], ...] = ()
    # NCCL settings the engine's processes run with whatever their env says; every rank of an NCCL weight-sync
    # group must agree (a trainer with NCCL's cuMem allocator on and an engine with it off hang at the first
    # collective: SGLang sets NCCL_CUMEM_ENABLE=0 unless --enable-symm-mem, sglang/srt/entrypoints/engine.py)
    nccl_env: Mapping[str, str] = field(default_factory=dict)
    # answers return_routed_experts=true with meta_info.routed_experts (SGLang's field; rollout.routing_replay)
    routed_experts: bool = False
    # serves block-wise FP8 (e4m3, 128 x 128 scales) linear weights, loaded from an FP8 checkpoint or a push
    # through rlrun.rollout.fp8 (rollout.fp8)
    fp8: bool = False
    # takes a checkpoint's multi-token prediction layers in a push under their HF names (model.mtp_num_layers: SGLang
    # loads the target model from the checkpoint and skips them, its EAGLE draft reads them); else a push of them fails
    mtp_weights: bool = False
    # the path the router and rlrun's engine monitor poll for liveness: it answers at once, paused or not, and holds
    # nothing a pause waits for. SGLang 0.5.16's /health generates a token under the lock its abort-mode pause
    # polls once a second (http_server.health_generate, tokenizer_manager.pause_generation), so a probe in flight
    # cost the colocated offload 1.0 s in 6 of 10 steps, and a probe of a paused engine waits 20 s, then fails
    probe_path: str = "/health"
    # args dict (rollout.<args_key>) -> whether a request's sampling_seed decides its tokens. Where it does not, rlrun
    # sends no seed, so the n samples of a group are the same request and go as one batched /generate
    # (rlrun.rollout.client); where it does, each sample goes alone with its own seed (sglang-router 0.3.2 takes one
    # sampling_params per request). SGLang 0.5.16 samples with the seed only under enable_deterministic_inference
    # (sampling_batch_info.py: sampling_seed is None otherwise)
    seeded: Callable[[dict], bool] = lambda args: True

    def __post_init__(self) -> None:
        _one_of(self, "memory", ("static_pool", "per_sequence"))
        for t in self.weight_sync or ():
            _one_of(self, "weight_sync", TRANSPORTS.names(), t)

    def transports(self) -> tuple[str, ...]:
        """The transports it accepts, of those registered."""
        return tuple(t for t in TRANSPORTS if self.weight_sync is None or t in self.weight_sync)


ENGINES: Kinds[EngineKind] = Kinds("rollout.engine")


@dataclass(frozen=True)
class RouterKind:
    """A router kind (rollout.router.kind): the process in front of the engines. One package whose pure spec.py
    registers this and whose launcher is a RolloutRouter (rlrun.rollout.routers.protocol): rlrun.rollout.routers.<kind>/
    (found by discovery), or inside the package of the project it comes from (sglang_router: SGLang's router,
    rlrun.rollout.engines.sglang.router/, registered by that package's spec.py); the runner builds the run's router
    through it, the fleet registers the engines with it."""
    name: str
    policies: tuple[str, ...]                # rollout.router.policy values it offers
    # "module:function"(*, policy, log_dir, host=, port=, request_timeout_s=, **options) -> a RolloutRouter, not
    # started (rlrun.rollout.routers.protocol), imported when a run builds its router
    factory: str = ""
    packages: tuple[str, ...] = ()           # its distributions, recorded in a run dir's versions.json


ROUTERS: Kinds[RouterKind] = Kinds("rollout.router.kind")


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
    # replicated per DP rank; "sharded" = bf16 weights, fp32/bf16 grads, fp32 master + moments over DP
    memory: str = "fp32"
    # its activation terms were checked against measured peaks (docs/benchmarks.md, "Memory"); otherwise the gate
    # refuses a config for memory only when the rest (weights, grads, optimizer, engine) already overflows
    activations_calibrated: bool = False
    factory: str = ""                        # "module:Class", the TrainerBackend subclass
    # reads train.megatron (megatron-core's own config fields, passed through); "module:function"(cfg) ->
    # Problems, run by rlrun validate; empty: a train.megatron mapping is refused
    passthrough_check: str = ""
    # "module:function"(cfg) -> [(dotted key, Python module, the fix: install it or ...)]: modules a train.megatron
    # setting makes it import where it runs (e.g. DeepEP's deep_ep for the flex dispatcher), found by the preflight
    # as `requires` is (rlrun.launch.preflight.embedded_ray)
    passthrough_requires: str = ""
    # model families it builds besides those whose rlrun.config.families entry names it (a plugin backend)
    families: tuple[str, ...] = ()
    teacher: bool = False                    # runs a distillation teacher's forward (algo.distill.where=trainer)
    lora: bool = False                       # trains a LoRA adapter (model.lora.rank > 0)
    # "module:function"(cfg) -> Problems: what its LoRA cannot do with this config (rlrun validate); empty: nothing
    lora_check: str = ""
    # Python modules it imports where it runs, each with how to install it (the preflight finds them for an
    # embedded Ray: rlrun.launch.preflight.embedded_ray)
    requires: tuple[tuple[str, str], ...] = ()
    # replays the engines' routed experts in its MoE layers (rollout.routing_replay): the model families it
    # does it for (those whose router it hooks), empty: none
    routing_replay: tuple[str, ...] = ()
    # "module:function"(cfg) -> Problems: what its routing replay cannot do with this config (rlrun validate)
    routing_replay_check: str = ""
    # builds a checkpoint's multi-token prediction layers (model.mtp_num_layers), syncs them to the engines and
    # trains them (train.mtp.enabled)
    mtp: bool = False

    def __post_init__(self) -> None:
        _one_of(self, "memory", ("fp32", "sharded"))
        for d in self.state_dtypes:
            _one_of(self, "state_dtypes", ("fp32", "bf16"), d)


BACKENDS: Kinds[BackendKind] = Kinds("train.backend")
# torch: fp32 HF weights 4 + Adam m and v 8 = 12 B/param in a checkpoint
BACKENDS.register(BackendKind("torch", needs_gpu=False, model_parallel=False, critic=True, state_dtypes=("fp32",),
                              bf16_grads=False, cuda_graphs=False, sliding_window=True,
                              checkpoint_bytes={"fp32": 12}, memory="fp32", teacher=True, lora=True,
                              routing_replay=("qwen3_moe",),  # transformers' Qwen3MoeTopKRouter (rollout/routing.py)
                              factory="rlrun.train.torch_backend:TorchBackend"))
# megatron: bf16 HF weights 2 + fp32 master 4 + Adam m and v (4 + 4, or 2 + 2 with optim.state_dtype=bf16)
BACKENDS.register(BackendKind("megatron", needs_gpu=True, model_parallel=True, critic=False,
                              state_dtypes=("fp32", "bf16"), bf16_grads=True, cuda_graphs=True,
                              sliding_window=False, checkpoint_bytes={"fp32": 14, "bf16": 10},
                              memory="sharded", activations_calibrated=True, teacher=True,
                              lora=True, lora_check="rlrun.train.megatron.lora_rules:check",
                              factory="rlrun.train.megatron_backend:MegatronBackend",
                              passthrough_check="rlrun.train.megatron.passthrough:check_config",
                              passthrough_requires="rlrun.train.megatron.passthrough:requires",
                              # megatron-core 0.19.2's RouterReplay (rlrun/train/megatron/routing.py)
                              routing_replay=("qwen3_moe",),
                              routing_replay_check="rlrun.train.megatron.replay_rules:check",
                              mtp=True,  # megatron-core's MultiTokenPredictionBlock (rlrun.train.megatron.model)
                              requires=(("megatron.core", "pip install 'rlrun[megatron]' (docs/megatron.md)"),)))


# ---- advantage estimators --------------------------------------------------------------------------------

@dataclass(frozen=True)
class EstimatorKind:
    """An advantage estimator: its whole behaviour is here (the token rule and policy loss by path)."""
    name: str
    # rewards after the group normalisation -> (advantages, returns) per token: "module:function"(r, lmask, rmask,
    # tok_kl, values, kl_coef=, gamma=, lambd=) (rlrun.algo.advantages)
    token_rule: Any = ""
    group_normalised: bool = False           # rewards normalised within each prompt's group (needs n >= 2)
    std_normalised: bool = True              # with group_normalised: also / group std (algo.normalize_std)
    needs_critic: bool = False               # a value model (GAE): the backend must build a critic
    needs_whitening: bool = False            # algo.normalize_advantages must be on
    # per-token policy loss: "module:function"(logp, old_logp, advantages, mask, eps_clip, eps_clip_high,
    # dual_clip_c, cu_seqlens) -> (loss, clipfrac, ppo_kl) (rlrun.algo.losses)
    policy_loss: Any = "rlrun.algo.losses:ppo_policy_loss"


_ADV = "rlrun.algo.advantages:"
ESTIMATORS: Kinds[EstimatorKind] = Kinds("algo.advantage_estimator")
ESTIMATORS.register(EstimatorKind("grpo", _ADV + "group_reward", group_normalised=True))
ESTIMATORS.register(EstimatorKind("gspo", _ADV + "group_reward", group_normalised=True,
                                  policy_loss="rlrun.algo.losses:gspo_policy_loss"))
ESTIMATORS.register(EstimatorKind("cispo", _ADV + "group_reward", group_normalised=True,
                                  policy_loss="rlrun.algo.losses:cispo_policy_loss"))
ESTIMATORS.register(EstimatorKind("reinforce_plus_plus", _ADV + "reinforce", needs_whitening=True))
ESTIMATORS.register(EstimatorKind("reinforce_plus_plus_baseline", _ADV + "reinforce_baseline", group_normalised=True,
                                  std_normalised=False, needs_whitening=True))
ESTIMATORS.register(EstimatorKind("ppo", _ADV + "gae_rule", needs_critic=True))


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


# ---- reward types (data.rm_type, eval.datasets.N.rm_type) ------------------------------------------------

@dataclass(frozen=True)
class RewardKind:
    """A reward type: rlrun.reward.spec registers the built-in ones (a pure module: the rules check rm_type against
    this registry without importing the reward package, whose graders import math-verify)."""
    name: str
    # "module:function"(response, label, metadata) -> float, run in this process or a reward worker
    # (rlrun.reward.rules.rule_score); "" for a remote type
    score: Any = ""
    remote: bool = False             # POSTs every sample to data.rm_url (rlrun.reward.remote)
    # a right answer needs the label's text in the response (the preflight checks labels against
    # rollout.max_response_len); its top score is 1.0 (rlrun.reward.rules.top_score)
    label_in_response: bool = False
    in_process: bool = False         # linear-time and allocation-free: not worth a round trip to a worker
    judged: bool = False             # the reward engines judge every sample (reward.model; rlrun.reward.judge)

    def __post_init__(self) -> None:
        if [bool(self.score), self.remote, self.judged].count(True) != 1:
            raise ValueError(f"RewardKind({self.name!r}): give one of score (a rule), remote=True or judged=True")


REWARDS: Kinds[RewardKind] = Kinds("data.rm_type")


@dataclass(frozen=True)
class TeacherKind:
    """Where a distillation teacher runs (algo.distill.where; docs/algorithms.md "On-policy distillation")."""
    name: str
    in_trainer: bool = False   # the trainer ranks build it and run its forward (BackendKind.teacher)
    served: bool = False       # an engine answers its log-probs: rlrun's teacher engines, or algo.distill.url
    # "module:Class" with from_parts(cfg, plan, trainer, start) -> an object whose log_probs(batch) gives the
    # teacher's per-response-token log-probs (rlrun.parts.teacher), imported when a run builds it
    part: str = ""


TEACHERS: Kinds[TeacherKind] = Kinds("algo.distill.where")
TEACHERS.register(TeacherKind("trainer", in_trainer=True, part="rlrun.parts.teacher:TrainerTeacher"))
TEACHERS.register(TeacherKind("engine", served=True, part="rlrun.parts.teacher:EngineTeacher"))


def label_in_response(rm_type: str) -> bool:
    """rm_type (boxed_ prefix or not) is a rule type whose full score needs the label's text in the response (a
    response too short to hold the label, or unable to spell it, scores 0): the preflight checks the labels."""
    base = rm_type.removeprefix("boxed_")
    return base in REWARDS and REWARDS[base].label_in_response


def needs_rollout(cfg: Any) -> bool:
    """Whether the run generates with engines: the one place "this loss trains on a dataset only" is decided."""
    return LOSS_TYPES[cfg.algo.loss_type].needs_rollout


def builds(backend: str, family: str, family_backends: tuple[str, ...]) -> bool:
    """Whether train.backend `backend` builds model family `family` (whose registry entry lists
    `family_backends`)."""
    return backend in family_backends or family in BACKENDS[backend].families


def use_teacher(cfg: Any) -> bool:
    """Whether the run distils from a teacher (algo.distill.teacher or algo.distill.url set): the one place it is
    decided."""
    return cfg.algo.distill.teacher is not None or cfg.algo.distill.url is not None


def trainer_teacher(cfg: Any) -> bool:
    """Whether the trainer builds the teacher and runs its forward (algo.distill.where a kind in the trainer)."""
    return cfg.algo.distill.teacher is not None and TEACHERS[cfg.algo.distill.where].in_trainer


def use_teacher_engines(cfg: Any) -> bool:
    """Whether the run starts teacher engines (a served teacher from a checkpoint, not an external
    algo.distill.url, and engines generating samples for it to score): the one place it is decided."""
    d = cfg.algo.distill
    return TEACHERS[d.where].served and d.teacher is not None and d.url is None and needs_rollout(cfg)


def use_reward_model(cfg: Any) -> bool:
    """Whether the run starts reward engines (reward.model.checkpoint set, and engines generate samples to judge):
    the one place it is decided."""
    return cfg.reward.model.checkpoint is not None and needs_rollout(cfg)


def use_critic(cfg: Any) -> bool:
    """Whether the run trains a critic: the one place "this estimator needs a value model" is decided."""
    return ESTIMATORS[cfg.algo.advantage_estimator].needs_critic
