"""The resolved config tree as frozen pydantic models (field names: docs/CONTRACT.md).

Types, enums and single-field ranges live here; defaults live in conf/ (every field is required, so a
key missing from the YAML is a bug we see at once); null-means-derived values are filled by
rlrun.config.derive before validation, so a RunConfig always holds concrete values. Cross-field rules
live in rlrun.config.rules."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from rlrun.config.families import NAMES as FAMILY_NAMES
from rlrun.config.kinds import BACKENDS, ENGINES, ESTIMATORS, LOSS_TYPES, ROUTERS, TEACHERS, TRANSPORTS, Kinds

PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
PosFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]


AUTO = ("auto",)  # a kind field's extra value (a name, not a literal: string literals in annotations read as types)


def _kind(kinds: Kinds, also: tuple[str, ...] = ()) -> Any:
    """A name from a kind registry (rlrun.config.kinds), read when a config is validated, so that a kind
    registered later is allowed; an unknown name is reported as pydantic reports a Literal. also: names
    allowed besides the kinds (rollout.weight_sync's auto)."""
    def known(name: str) -> str:
        if name not in kinds and name not in also:
            raise _not_one_of((*also, *kinds.names()))
        return name
    return Annotated[str, AfterValidator(known), kinds, KindNames(also)]  # read by rlrun.config.contract_docs


def _not_one_of(allowed: tuple[str, ...]) -> PydanticCustomError:
    """The error pydantic gives a value outside a Literal of `allowed`."""
    names = [repr(n) for n in allowed]
    expected = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    return PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})


class KindNames(tuple):
    """Names a kind field allows besides its registry's (metadata for rlrun.config.contract_docs)."""


class Section(BaseModel):
    # extra="forbid": a typo is an error (with a did-you-mean), never silently ignored as in slime.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class RunSection(Section):
    name: Annotated[str, Field(min_length=1)]
    seed: int
    output_dir: str
    resume: Literal["never", "auto", "must"]
    dry_run: bool


class SlurmSection(Section):
    partition: Optional[str]
    account: Optional[str]
    time: Annotated[str, Field(pattern=r"^(\d+-)?\d+(:\d{2}){0,2}$")]  # sbatch --time: [D-]H[:MM[:SS]]


class KubeRaySection(Section):
    image: Optional[str]
    namespace: Annotated[str, Field(min_length=1)]
    memory_per_node: Annotated[str, Field(pattern=r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")]  # a k8s quantity
    pvc: Optional[str]
    mount_path: Annotated[str, Field(pattern=r"^/")]
    image_paths: list[Annotated[str, Field(pattern=r"^/")]]  # absolute folders the image holds (model weights...)


class ClusterSection(Section):
    address: Optional[str]
    num_nodes: PosInt
    cpus_per_node: PosInt
    slurm: SlurmSection
    kuberay: KubeRaySection


class HardwareDefaults(Section):
    offload_train: Optional[bool]                   # null = auto (rlrun.config.memory.trainer_offload)
    offload_rollout: bool
    gradient_accumulation_fusion: bool
    mem_fraction_static: Annotated[float, Field(gt=0, lt=1)]  # a static-pool engine's share when rollout's is null


class HardwareSection(Section):
    name: str
    vendor: Literal["cpu", "cuda", "rocm"]
    gpus_per_node: PosInt
    memory_gib: PosFloat
    peak_bf16_tflops: PosFloat
    fp8: bool                                 # FP8 (e4m3) matrix units: engines may serve FP8 weights (rollout.fp8)
    fp8_push: bool                            # a sync's e4m3fn weights + float32 128x128 scales are what SGLang holds
    env: dict[str, Union[str, int, float, bool]]  # stringified below: `+hardware.env.X=1` parses as an int
    defaults: HardwareDefaults

    @field_validator("env")
    @classmethod
    def _env_as_strings(cls, env: dict) -> dict[str, str]:
        return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in env.items()}


class MoESection(Section):
    num_experts: PosInt
    top_k: PosInt
    expert_ffn_hidden_size: PosInt
    shared_expert_ffn_hidden_size: NonNegInt  # 0 = no shared expert
    first_k_dense: NonNegInt                 # leading dense layers before the MoE layers
    router: Literal["softmax", "sigmoid"]
    n_group: PosInt                          # 1 = no group-limited routing
    topk_group: PosInt


class MLASection(Section):
    q_lora_rank: Optional[PosInt]       # null = full-rank q projection
    kv_lora_rank: PosInt
    qk_rope_head_dim: PosInt
    qk_nope_head_dim: PosInt
    v_head_dim: PosInt


class LoraSection(Section):
    rank: NonNegInt                          # 0 = off
    alpha: PosFloat
    dropout: Annotated[float, Field(ge=0, lt=1)]
    target_modules: Annotated[list[str], Field(min_length=1)]
    modules_to_save: list[str]               # trained whole beside the adapter (peft modules_to_save)


class ModelSection(Section):
    hub_id: Optional[str] = None   # the HF repo of the real weights (rlrun.config.hub); null: random init only
    name: str
    family: Literal[FAMILY_NAMES]  # type: ignore[valid-type]  # rlrun.config.families.FAMILIES
    num_layers: PosInt
    hidden_size: PosInt
    ffn_hidden_size: PosInt
    num_attention_heads: PosInt
    num_query_groups: PosInt
    head_dim: PosInt
    vocab_size: PosInt
    rotary_base: PosFloat
    rotary_percent: Annotated[float, Field(gt=0, le=1)]
    rope_scaling_factor: Annotated[float, Field(ge=1)]       # 1.0 = no rope scaling
    max_position_embeddings: PosInt
    norm_epsilon: PosFloat
    tie_word_embeddings: bool
    qk_layernorm: bool
    add_qkv_bias: bool
    swiglu: bool
    post_norms: bool
    moe: Optional[MoESection]
    mla: Optional[MLASection]
    # multi-token prediction layers the checkpoint carries (config.json's num_nextn_predict_layers: DeepSeek-V3,
    # GLM-4.x-MoE, MiMo): the megatron backend builds megatron-core's MTP block, loads them and syncs them to the
    # engines (SGLang's EAGLE draft reads them); trained only with train.mtp.enabled. 0 = not modelled
    mtp_num_layers: NonNegInt
    lora: LoraSection


class CheckpointSection(Section):
    hf: Optional[str]          # derived: null -> model.hub_id's local HF cache dir (or the hub id, refused by
                               # the preflight until downloaded); stays null for random init
    random_init: bool          # true: random weights from model.* even when the model has released weights
    ref: Optional[str]         # derived: null -> hf (still null when hf is null: the random-init policy)
    load: Optional[str]
    save: Optional[str]        # null = {run dir}/checkpoints (decided when the run dir exists)
    save_interval: Optional[PosInt]
    keep_last: Optional[PosInt]   # null = keep every checkpoint (slime's and Megatron's behaviour)
    async_save: bool              # snapshot to host, write in the background (rlrun.train.async_save)


class ParallelismSection(Section):
    tp: PosInt
    pp: PosInt
    cp: PosInt
    ep: PosInt
    sequence_parallel: bool


class RecomputeSection(Section):
    granularity: Optional[Literal["full", "selective"]]
    method: Optional[Literal["uniform", "block"]]
    num_layers: Optional[PosInt]


class MTPSection(Section):
    enabled: bool                 # the MTP layers' loss joins the RL loss (slime --enable-mtp-training); off: frozen
    loss_scaling_factor: Annotated[float, Field(ge=0)]  # weight of the mean MTP loss (slime --mtp-loss-scaling-factor)


class TrainSection(Section):
    backend: _kind(BACKENDS)  # type: ignore[valid-type]
    num_nodes: PosInt
    gpus_per_node: PosInt
    colocate: bool
    # derived from hardware.defaults.offload_train; null = auto: resident when trainer and engines fit on a GPU
    # together, else offloaded (rlrun.config.memory.trainer_offload; the plan's offload_train says which and why)
    offload: Optional[bool]
    global_batch_size: PosInt                 # derived from the batch identity
    num_steps_per_rollout: PosInt             # derived from the batch identity
    micro_batch_size: PosInt
    use_dynamic_batch_size: bool
    max_tokens_per_gpu: Optional[PosInt]
    log_probs_max_tokens_per_gpu: Optional[PosInt]  # derived: null -> max_tokens_per_gpu
    recompute: RecomputeSection
    gradient_accumulation_fusion: bool              # derived from the hardware default
    fp32_grads: bool                                # megatron: grads accumulated and reduced in fp32
    cuda_graphs: bool                               # megatron: micro-batch fwd+loss+bwd as CUDA graphs
    calculate_per_token_loss: bool
    async_train: bool
    mtp: MTPSection                                 # megatron: multi-token prediction training (model.mtp_num_layers)
    megatron: dict[str, Any]                        # megatron-core config fields, passed through (BackendKind.passthrough_check)

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node


class DeltaSection(Section):
    """rollout.weight_sync=delta (rlrun.rollout.transports.delta; slime's --update-weight-delta-*)."""
    encoding: Literal["xor", "overwrite"]              # rlrun.rollout.delta.ENCODINGS
    checksum: Literal["xxh3-128", "blake3", "adler32"]  # rlrun.rollout.delta.CHECKSUMS
    dir: Optional[str]        # where the trainer publishes; null = <run dir>/weight_sync (shared with the engine hosts)
    local_dir: Optional[str]  # each engine host's local checkpoint; null = <tmp>/rlrun-delta/<run dir name>
    full_every: NonNegInt     # a full version every N syncs, the older versions deleted; 0: never (every version kept)


class RouterSection(Section):
    kind: _kind(ROUTERS)  # type: ignore[valid-type]
    policy: str                               # one of the kind's RouterKind.policies
    host: str
    port: Optional[Annotated[int, Field(gt=0, lt=65536)]]     # null = a free port at launch
    request_timeout_s: PosFloat

    @field_validator("policy")
    @classmethod
    def _policy(cls, policy: str, info: Any) -> str:
        """A policy the router kind offers (reported as pydantic reports a Literal); an unknown kind is its own
        error."""
        kind = info.data.get("kind")
        if kind is not None and policy not in ROUTERS[kind].policies:
            raise _not_one_of(ROUTERS[kind].policies)
        return policy


class RolloutSection(Section):
    engine: _kind(ENGINES)  # type: ignore[valid-type]
    num_rollout: PosInt
    rollout_batch_size: PosInt
    n_samples_per_prompt: PosInt
    over_sampling_batch_size: PosInt          # derived: null -> rollout_batch_size
    max_response_len: PosInt
    temperature: float
    top_p: float
    top_k: int
    stop: list[str]
    stop_token_ids: list[int]                 # token ids that end a response (SGLang's stop_token_ids)
    num_gpus: PosInt                          # derived: colocated -> trainer GPUs
    gpus_per_engine: PosInt
    # null = auto (rlrun.config.memory.engine_fraction: the hardware default, or the pool that keeps a colocated
    # trainer resident while holding a whole rollout; the plan says which and why)
    mem_fraction_static: Optional[Annotated[float, Field(gt=0, lt=1)]]
    context_length: PosInt                    # derived: null -> model.max_position_embeddings
    offload: bool                                   # derived from hardware.defaults.offload_rollout
    dynamic_sampling: Optional[Literal["nonzero_std"]]
    partial_rollout: bool
    mask_offpolicy_in_partial_rollout: bool
    routing_replay: bool                      # R3: the engines' routed experts replayed in the trainer's MoE layers
    fp8: bool                                 # engines serve block-wise FP8 e4m3 weights, the trainer keeps bf16
    generate_fn: Optional[str]                # null = single_turn (rlrun.rollout.generate_api; rlrun.agent.resolve)
    rollout_fn: Optional[str]                 # slime:<module>:<fn>, slime's rollout function (rlrun.agent.slime_rollout)
    async_buffer_size: PosInt                 # async: rollouts generated ahead of the trainer
    update_weights_interval: PosInt           # async: weight push every N rollouts
    max_staleness: Optional[NonNegInt]        # async: bound on trainer version - token version
    max_concurrency: PosInt
    request_timeout_s: PosFloat
    max_retries: NonNegInt
    retry_window_s: PosFloat                  # derived: null -> rlrun.config.engine_health.engine_loss_s()
    max_engine_restarts: NonNegInt          # restarts of one engine before the run stops (naming its node)
    engine_start_timeout_s: PosFloat          # an engine healthy within this after its launch (each restart too)
    balance_data: bool
    max_turns: PosInt
    tool_timeout_s: PosFloat
    weight_sync: _kind(TRANSPORTS, also=AUTO)  # type: ignore[valid-type]  # auto: rlrun.config.plan.weight_sync
    weight_sync_bucket_mb: PosInt             # bucket size of the pushes from the trainer's memory
    weight_sync_timeout_s: PosFloat           # each step of a tensor/distributed push (group join, a bucket, a request)
    delta: DeltaSection                       # rollout.weight_sync=delta's settings
    router: RouterSection
    # + one free-form section per engine kind that takes arguments (rollout.<EngineKind.args_key>, e.g. the
    # SGLang server args): read by that kind's spec (rlrun.config.kinds.engine_args), refused by the others

    @model_validator(mode="wrap")
    @classmethod
    def _engine_args(cls, data: Any, handler: Any) -> Any:
        """The engine kinds' argument sections are kept aside (every other unknown key stays an error)."""
        args = {}
        if isinstance(data, dict):
            keys = set(cls.extra_keys())
            args = {k: v for k, v in data.items() if k in keys}
            data = {k: v for k, v in data.items() if k not in keys}
            for k, v in args.items():
                if not isinstance(v, dict):
                    raise PydanticCustomError("dict_type", "rollout.{key} should be a mapping of the engine's "
                                              "arguments, got {value!r}", {"key": k, "value": v})
        self = handler(data)
        if args:
            object.__setattr__(self, "__pydantic_extra__", {**(self.__pydantic_extra__ or {}), **args})
        return self

    @model_serializer(mode="wrap")
    def _dump_engine_args(self, handler: Any) -> dict:
        return {**handler(self), **(self.__pydantic_extra__ or {})}

    @classmethod
    def extra_keys(cls) -> list[str]:
        """The engine kinds' argument sections, in registration order (rlrun.config.contract_docs lists them)."""
        return list(dict.fromkeys(spec.args_key for spec in ENGINES.values() if spec.args_key))

    def args_of(self, engine: str | None = None) -> dict:
        """The arguments rollout.<args_key> holds for engine kind `engine` (default: this run's)."""
        key = ENGINES[engine or self.engine].args_key
        return dict((self.__pydantic_extra__ or {}).get(key) or {}) if key else {}

    @property
    def num_engines(self) -> int:
        return self.num_gpus // self.gpus_per_engine


class EvalDataset(Section):
    name: str
    path: str
    rm_type: str
    # one dataset's own sampling (slime's --eval-config per-dataset keys); derived: null -> the eval section's value.
    # A list item has no YAML of its own, so these are the one place their null default is written.
    n_samples_per_prompt: Optional[PosInt] = None
    max_response_len: Optional[PosInt] = None
    top_p: Optional[float] = None
    temperature: Optional[float] = None
    top_k: Optional[int] = None


class EvalSection(Section):
    interval: Optional[PosInt]
    n_samples_per_prompt: PosInt
    max_response_len: PosInt                  # derived: null -> rollout.max_response_len
    top_p: float                                    # derived: null -> rollout.top_p
    temperature: float                              # derived: null -> rollout.temperature
    top_k: int                                      # derived: null -> rollout.top_k
    datasets: list[EvalDataset]


class DataSection(Section):
    name: str
    prompt_data: Optional[str]                      # null = the packaged toy task
    # the packaged toy task's kind (rlrun.data.toy.TOY_TASKS; a test keeps the two in step)
    toy_task: Literal["echo", "last", "first", "max", "add", "copy", "reverse"]
    input_key: str
    label_key: Optional[str]
    metadata_key: Optional[str]
    apply_chat_template: bool
    rm_type: str
    rm_url: Optional[str]                           # rm_type remote: the reward server's POST endpoint
    reward_key: Optional[str]                       # a slime reward function's dict reward: the key trained on
    max_prompt_len: Optional[PosInt]     # null = no prompt-length filter
    shuffle: bool
    num_epochs: PosInt
    source: Optional[str]                 # null = the prompt dataset; else a DataSource class (docs/agents.md)


class ServedSection(Section):
    """A model served by engines of its own beside the rollout engines, placed by the plan (reward.model, a served
    distillation teacher's algo.distill.served): the engine kind, how many, how wide, where, and how it is asked."""
    # derived with a model to serve: null -> rollout.engine (without one it stays null: no engine to name)
    engine: Optional[_kind(ENGINES)]  # type: ignore[valid-type]
    num_engines: PosInt
    gpus_per_engine: PosInt
    colocate: bool
    mem_fraction_static: Annotated[float, Field(gt=0, lt=1)]
    max_concurrency: PosInt
    timeout_s: PosFloat
    max_retries: NonNegInt


class RewardModelSection(ServedSection):
    """A reward model served as engines (docs/rewards.md "Reward engines"): data.rm_type=reward_model."""
    checkpoint: Optional[str]              # null = no reward engines
    mode: Literal["discriminative", "generative"]   # rlrun.reward.judge.MODES
    prompt_template: Annotated[str, Field(min_length=1)]
    target: str
    parser: str
    max_new_tokens: PosInt


class RewardSection(Section):
    model: RewardModelSection


class DistillSection(Section):
    teacher: Optional[str]                 # null (and no url) = no distillation
    coef: NonNegFloat
    where: _kind(TEACHERS)  # type: ignore[valid-type]  # trainer | engine (slime --opd-type megatron | sglang)
    reward: Literal["add", "replace"]
    url: Optional[str]                     # where=engine: an external teacher server's /generate (slime --rm-url)
    served: ServedSection                  # where=engine with a teacher: the teacher engines rlrun starts


class AlgoSection(Section):
    name: str
    loss_type: _kind(LOSS_TYPES)  # type: ignore[valid-type]  # policy_loss | sft_loss (slime --loss-type)
    advantage_estimator: _kind(ESTIMATORS)  # type: ignore[valid-type]
    normalize_std: bool                             # derived: forced off when n_samples_per_prompt == 1
    normalize_advantages: bool
    eps_clip: PosFloat
    eps_clip_high: PosFloat              # derived: null -> eps_clip
    dual_clip_c: Optional[float]
    use_kl_loss: bool
    kl_loss_coef: NonNegFloat
    kl_loss_type: Literal["k1", "k2", "k3", "low_var_kl"]
    kl_coef: NonNegFloat
    entropy_coef: NonNegFloat
    gamma: Fraction
    lambd: Fraction
    value_clip: PosFloat
    use_tis: bool
    tis_clip: PosFloat
    tis_clip_low: NonNegFloat
    tis_level: Literal["token", "sequence", "geometric"]   # rlrun.algo.offpolicy.LEVELS
    tis_mode: Literal["truncate", "mask", "reject"]        # rlrun.algo.offpolicy.MODES
    tis_reject_scope: Literal["pg", "all"]
    use_rs: bool
    rs_level: Literal["token", "sequence", "geometric"]
    rs_clip: PosFloat                    # derived: null -> tis_clip
    rs_clip_low: NonNegFloat             # derived: null -> tis_clip_low
    rs_veto_threshold: Optional[Annotated[float, Field(gt=0, lt=1)]]
    tis_batch_normalize: bool
    use_opsm: bool
    opsm_delta: NonNegFloat
    opsm_reference: Literal["rollout", "old"]
    use_unbiased_kl: bool
    use_rollout_logprobs: bool
    reward_post_process: Optional[str]   # slime:<path> (rlrun.agent.slime_rollout.SlimeRewardPostProcess)
    distill: DistillSection


class OptimSection(Section):
    optimizer: Literal["adam"]
    lr: PosFloat
    min_lr: NonNegFloat
    lr_decay_style: Literal["constant", "linear", "cosine"]
    lr_warmup_iters: NonNegInt
    lr_warmup_fraction: Optional[Annotated[float, Field(ge=0, le=1)]]  # of the run's optimizer steps (Megatron's)
    weight_decay: NonNegFloat
    adam_beta1: Annotated[float, Field(ge=0, lt=1)]
    adam_beta2: Annotated[float, Field(ge=0, lt=1)]
    adam_eps: PosFloat
    clip_grad: NonNegFloat                  # 0 = no clipping
    state_dtype: Literal["fp32", "bf16"]     # Adam moments (megatron; master weights stay fp32)
    critic_lr: PosFloat                     # derived: null = lr (PPO's critic)


class WandbSection(Section):
    mode: Literal["offline", "online", "disabled"]
    project: str
    entity: Optional[str]
    group: Optional[str]                    # wandb.init(group=...): runs shown together (slime --wandb-group)
    host: Optional[str]                     # a self-hosted W&B server's URL (slime --wandb-host): wandb.login(host=...)


class LoggingSection(Section):
    wandb: WandbSection
    tensorboard: bool
    progress: bool
    rollout_records: Literal["none", "sample", "all"]


class DebugSection(Section):
    rollout_only: bool
    profile_steps: list[NonNegInt]
    profile_engines: bool


Severity = Literal["stop", "warn", "off"]


class CheckSeverity(Section):
    """One field per run invariant (rlrun.guard.invariants.CHECKS holds the same names)."""
    samples: Severity
    resume_trains: Severity
    staleness: Severity
    groups: Severity
    nonfinite: Severity
    logprob_mismatch: Severity
    logprob_jump: Severity
    zero_variance: Severity
    truncation_reward: Severity
    engine_uniform: Severity
    weight_sync: Severity


class WatchdogSection(Section):
    on_stall: Literal["stop", "wait", "off"]
    factor: Annotated[float, Field(ge=1)]
    floor_s: PosFloat
    first_s: PosFloat
    poll_s: PosFloat


class ChecksSection(Section):
    severity: CheckSeverity
    logprob_mismatch_max: PosFloat
    logprob_jump_factor: Annotated[float, Field(gt=1)]
    logprob_jump_floor: NonNegFloat
    zero_variance_max: Fraction
    truncation_corr_max: Annotated[float, Field(gt=0, le=1)]
    memory_fit: Severity                    # the gate, before the run: the plan's memory estimate above a GPU's memory
    watchdog: WatchdogSection


class RunConfig(Section):
    run: RunSection
    cluster: ClusterSection
    hardware: HardwareSection
    model: ModelSection
    checkpoint: CheckpointSection
    parallelism: ParallelismSection
    train: TrainSection
    rollout: RolloutSection
    eval: EvalSection
    data: DataSection
    reward: RewardSection
    algo: AlgoSection
    optim: OptimSection
    logging: LoggingSection
    debug: DebugSection
    checks: ChecksSection

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def free_form_paths(model: type[BaseModel] = RunConfig, prefix: str = "") -> list[str]:
    """The sections that take keys of the user's choosing (`+hardware.env.X=1`, `+rollout.sglang.Y=2`): every
    other key is fixed by this schema, so `+key=value` anywhere else is refused as an unknown key."""
    import typing

    out: list[str] = []
    for name, f in model.model_fields.items():
        ann = f.annotation
        args = [a for a in typing.get_args(ann) if a is not type(None)] if typing.get_origin(ann) is Union else [ann]
        for a in args:
            if isinstance(a, type) and issubclass(a, BaseModel):
                out += free_form_paths(a, f"{prefix}{name}.")
            elif typing.get_origin(a) is dict:
                out.append(f"{prefix}{name}")
        if name == "rollout" and model is RunConfig:  # the engine kinds' argument sections (rollout.sglang, ...)
            out += [f"rollout.{key}" for key in RolloutSection.extra_keys()]
    return sorted(set(out))
