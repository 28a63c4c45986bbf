"""The plan: everything derived from a valid RunConfig that the runner needs and a user wants to see
before a GPU is taken: batch math, rank layout, placement of trainer ranks and engines on (node, GPU),
env. Pure arithmetic (no torch, no ray): `rlrun plan` prints it and every run dir saves it."""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from math import ceil
from typing import Any, Literal

from rlrun.config.cost import predict
from rlrun.config.hfcheck import hf_note
from rlrun.config.kinds import ENGINES, TRANSPORTS, chosen_transport, needs_rollout, use_reward_model, use_teacher_engines
from rlrun.config.memory import engine_fraction, estimate, lean_state_hint
from rlrun.config.params import count_params
from rlrun.config.schema import RunConfig
from rlrun.config.sizes import dp_size, sample_tokens


@dataclass(frozen=True)
class Slot:
    node: int
    gpu: int
    role: Literal["trainer", "engine", "reward", "teacher"]
    rank: int          # trainer rank, or engine id for role "engine" (a reward / teacher engine's for those roles)


@dataclass(frozen=True)
class RankCoord:
    """Megatron-core's rank order tp-cp-ep-dp-pp: rank = tp + TP*(cp + CP*(dp + DP*pp)); the expert
    grid reuses the same ranks as tp-ep-edp-pp, so ep = (rank // TP) % EP."""
    rank: int
    node: int
    gpu: int
    tp: int
    cp: int
    dp: int
    pp: int
    ep: int


@dataclass(frozen=True)
class Plan:
    world_size: int            # trainer ranks = tp * pp * cp * dp
    tp: int
    pp: int
    cp: int
    dp: int
    ep: int
    colocate: bool
    num_nodes: int             # nodes the placement uses (trainer and engines)
    gpus_per_node: int         # GPUs per node of the hardware profile
    trainer_gpus: int
    rollout_gpus: int
    num_engines: int
    gpus_per_engine: int
    nodes_per_engine: int      # nodes one engine spans: one SGLang process per node (--nnodes), 1 when it fits a node
    prompts_per_rollout: int
    samples_per_rollout: int
    steps_per_rollout: int
    global_batch_size: int
    samples_per_dp_rank: int   # per optimizer step
    micro_batches_per_step: int  # per DP rank; an upper bound with dynamic batching
    dynamic_batching: bool
    num_rollout: int
    total_steps: int
    total_samples: int
    offload_train: bool        # the trainer's state leaves the GPU while the engines generate (memory.trainer_offload)
    offload_rollout: bool
    weight_sync: str           # the transport (rollout.weight_sync, auto resolved; rlrun.rollout.transports)
    weight_sync_bucket_mb: int
    env: dict[str, str]
    placement: list[Slot]
    ranks: list[RankCoord]
    params_total: int = 0
    params_active: int = 0
    memory_gib: dict[str, float] = field(default_factory=dict)  # per GPU by role: trainer, engine, peak, available
    fits: bool = True
    memory: dict[str, Any] = field(default_factory=dict)        # the full estimate (rlrun.config.memory.Memory)
    choices: dict[str, Any] = field(default_factory=dict)
    # how a push reaches the engines' TP ranks (weight_sync_route: gathered per engine from the trainer ranks on its
    # GPUs, or the lead rank's copy to all); "" where the transport has no such choice
    weight_sync_route: str = ""
    notes: list[str] = field(default_factory=list)
    cost: dict[str, Any] = field(default_factory=dict)          # predicted time and cost (rlrun.config.cost)
    # train.megatron: megatron-core fields handed to the trainer's config objects unchanged
    backend_config: dict[str, Any] = field(default_factory=dict)
    offload_why: str = ""      # why offload_train is what it is (train.offload forced, or auto from the estimate)
    reward_engines: int = 0    # reward.model's engines (placement role "reward"); 0 = none
    reward_gpus: int = 0       # the GPUs they take of their own (0 when colocated with the rollout engines)
    teacher_engines: int = 0   # a served distillation teacher's engines (algo.distill.served; role "teacher")
    teacher_gpus: int = 0      # the GPUs they take of their own (0 when colocated with the rollout engines)
    engine_fraction: float = 0.0  # a static-pool engine's share of a GPU (rlrun.config.memory.engine_fraction)
    engine_fraction_why: str = ""

    def engine_slots(self, engine: int, role: str = "engine") -> list[Slot]:
        return [s for s in self.placement if s.role == role and s.rank == engine]

    def devices_per_node(self) -> list[int]:
        """Devices (GPU or CPU bundles) the placement puts on each of its nodes, node 0 first."""
        per_node = Counter(node for node, _ in {(s.node, s.gpu) for s in self.placement})
        return [per_node[n] for n in sorted(per_node)]

    def trainer_slot(self, rank: int) -> Slot:
        return next(s for s in self.placement if s.role == "trainer" and s.rank == rank)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def trainer_slots(cfg: RunConfig) -> list[Slot]:
    gpn = cfg.train.gpus_per_node
    return [Slot(r // gpn, r % gpn, "trainer", r) for r in range(cfg.train.num_gpus)]


def engine_slots(cfg: RunConfig) -> list[Slot]:
    """Colocated: engine e shares the GPUs of trainer ranks [e*g, (e+1)*g) (an engine wider than a trainer
    node spans g / train.gpus_per_node whole trainer nodes). Disaggregated: engines fill the GPUs the trainer
    leaves free, node by node (hardware.gpus_per_node, not an assumed 8: slime's gap), never splitting an
    engine that fits a node across nodes; an engine wider than a node takes g / gpus_per_node whole free nodes
    (SGLang runs it as one process per node with --nnodes, as slime does)."""
    if not needs_rollout(cfg):
        return []  # algo.loss_type=sft_loss: the trainer alone
    g = cfg.rollout.gpus_per_engine
    if cfg.train.colocate:
        return [Slot(s.node, s.gpu, "engine", s.rank // g) for s in trainer_slots(cfg)[: cfg.rollout.num_gpus]]
    used = {(s.node, s.gpu) for s in trainer_slots(cfg)}
    return _fill_free(used, cfg.rollout.num_engines, g, cfg.hardware.gpus_per_node, "engine")


def _fill_free(used: set, count: int, g: int, per_node: int, role: str) -> list[Slot]:
    """`count` blocks of g GPUs that `used` leaves free, node by node, never splitting a block that fits a node
    across nodes; a block wider than a node takes g / per_node whole nodes after the last node in use."""
    slots, node, gpu = [], 0, 0
    if g > per_node:  # whole nodes, after the last node the trainer touches
        node = max((n for n, _ in used), default=-1) + 1
        for engine in range(count):
            slots += [Slot(node + i // per_node, i % per_node, role, engine) for i in range(g)]
            node += g // per_node
        return slots
    for engine in range(count):
        while True:
            block = [(node, gpu + i) for i in range(g)]
            if gpu + g <= per_node and not used.intersection(block):
                break
            gpu += 1
            if gpu + g > per_node:
                node, gpu = node + 1, 0
        slots += [Slot(n, k, role, engine) for n, k in block]
        gpu += g
    return slots


def served_slots(cfg: RunConfig, role: str, m, before: list[Slot]) -> list[Slot]:
    """The engines of a served model (a ServedSection `m`: reward.model, algo.distill.served) as plan role `role`:
    colocated, engine e shares the GPUs of the rollout engines' slots [e*g, (e+1)*g) (g = m.gpus_per_engine; on
    the CPU a process beside the engine's); else blocks of GPUs the slots `before` leave free, as disaggregated
    engines take theirs."""
    g = m.gpus_per_engine
    if m.colocate:
        under = [(s.node, s.gpu) for s in engine_slots(cfg)]
        return [Slot(n, k, role, i // g) for i, (n, k) in enumerate(under[: m.num_engines * g])]
    used = {(s.node, s.gpu) for s in before}
    return _fill_free(used, m.num_engines, g, cfg.hardware.gpus_per_node, role)


def reward_slots(cfg: RunConfig) -> list[Slot]:
    """The reward engines (reward.model), after the trainer and the rollout engines."""
    if not use_reward_model(cfg):
        return []
    return served_slots(cfg, "reward", cfg.reward.model, trainer_slots(cfg) + engine_slots(cfg))


def teacher_slots(cfg: RunConfig) -> list[Slot]:
    """A served distillation teacher's engines (algo.distill.served), after the reward engines."""
    if not use_teacher_engines(cfg):
        return []
    return served_slots(cfg, "teacher", cfg.algo.distill.served,
                        trainer_slots(cfg) + engine_slots(cfg) + reward_slots(cfg))


def nodes_per_engine(slots: list[Slot]) -> int:
    """How many nodes engine 0 spans (every engine spans as many: the layout rules see to it)."""
    return len({s.node for s in slots if s.role == "engine" and s.rank == 0}) or 1


def slots_by_rank(placement: list[Slot], role: str) -> dict[int, list[tuple[int, int]]]:
    """rank (trainer rank, engine id) of `role` -> its plan slots (node, gpu) in order: an engine's TP rank j on its
    j-th (the engines' launch gives TP rank j the j-th GPU of the engine's bundles, which are in this order)."""
    out: dict[int, list[tuple[int, int]]] = {}
    for s in placement:
        if s.role == role:
            out.setdefault(s.rank, []).append((s.node, s.gpu))
    return {rank: sorted(v) for rank, v in sorted(out.items())}


def weight_sync_route(cfg: RunConfig, placement: list[Slot], transport: str) -> str:
    """What `rlrun plan` says of a transport gathered per engine (TransportKind.gathered, as TrainGroup decides at run
    time): which trainer ranks' copies each engine's TP ranks get, or that the lead rank sends its copy to every engine
    because some engine GPU holds no trainer rank. Without that choice (or engines): what the transport says of its
    settings (TransportKind.describe; "" for nothing)."""
    kind = TRANSPORTS[transport]
    engines = slots_by_rank(placement, "engine")
    if kind.gathered is None or not engines:
        return kind.describe(cfg)
    copies = cfg.rollout.gpus_per_engine if ENGINES[cfg.rollout.engine].sharded_weights else 1
    ranks = kind.gathered(slots_by_rank(placement, "trainer"), engines, copies)
    lost = sorted(e for e, r in ranks.items() if r is None)
    if lost:
        return (f"from trainer rank 0 to every engine (engine(s) {', '.join(map(str, lost[:4]))}"
                f"{' ...' if len(lost) > 4 else ''} have a GPU with no trainer rank)")
    shown = [f"engine {e} <- ranks {','.join(map(str, r))}" for e, r in list(ranks.items())[:3]]
    return "gathered per engine: " + "; ".join(shown) + ("; ..." if len(ranks) > 3 else "")


def weight_sync(cfg: RunConfig) -> str:
    """The weight-sync transport rollout.weight_sync names; auto: the first registered transport
    (rlrun.config.kinds.TRANSPORTS, rlrun.rollout.transports) whose auto(cfg) holds: IPC colocated on one
    node, a broadcast from trainer rank 0 when the engines have GPUs of their own, a file for colocation
    across nodes."""
    return chosen_transport(cfg)


def rank_layout(cfg: RunConfig, dp: int) -> list[RankCoord]:
    p = cfg.parallelism
    out = []
    for s in trainer_slots(cfg):
        r = s.rank
        out.append(RankCoord(r, s.node, s.gpu, tp=r % p.tp, cp=(r // p.tp) % p.cp,
                             dp=(r // (p.tp * p.cp)) % dp, pp=r // (p.tp * p.cp * dp), ep=(r // p.tp) % p.ep))
    return out


def actor_env_vars(cfg: RunConfig) -> dict[str, str]:
    """The env the plan adds to every trainer and engine actor: on GPUs the NCCL settings the engine kind runs with
    when unset (every rank of an NCCL weight-sync group must agree: EngineKind.nccl_env), then hardware.env, which
    wins (an engine keeps a value its env already has)."""
    base = dict(ENGINES[cfg.rollout.engine].nccl_env) if cfg.hardware.vendor != "cpu" else {}
    return {**base, **{str(k): str(v) for k, v in cfg.hardware.env.items()}}


def make_plan(cfg: RunConfig, choices: dict[str, Any] | None = None) -> Plan:
    p, t, r = cfg.parallelism, cfg.train, cfg.rollout
    world, dp = t.num_gpus, dp_size(cfg)
    notes: list[str] = []
    per_rank = max(t.global_batch_size // dp, 1)
    if t.use_dynamic_batch_size and t.max_tokens_per_gpu:
        # With CP a micro-batch holds max_tokens_per_gpu * cp tokens split over the CP ranks (slime's rule).
        per_mb_tokens = t.max_tokens_per_gpu * p.cp
        micro = ceil(per_rank * sample_tokens(cfg) / per_mb_tokens)
        micro = min(max(micro, 1), per_rank)
        notes.append("micro_batches_per_step is an upper bound: dynamic batching packs by actual lengths")
    else:
        micro = ceil(per_rank / t.micro_batch_size)

    note = hf_note(cfg)
    if note:
        notes.append(note)
    if cfg.data.max_prompt_len is None:
        notes.append("data.max_prompt_len is null: prompt length bounded by rollout.context_length")
    if p.sequence_parallel and p.tp == 1:
        notes.append("parallelism.sequence_parallel is off at TP 1 (it shards activations over TP ranks; "
                     "Megatron drops it, and so does rlrun)")
    from rlrun.config.memory import trainer_offload

    offload, offload_why = trainer_offload(cfg)
    if t.cuda_graphs:
        notes.append("train.cuda_graphs: micro-batches are padded to a few shapes (rows to multiples of "
                     "max_tokens_per_gpu / 8, samples to powers of 2); a micro-batch replays a graph when its shape "
                     "was seen before" + (" in the same step: train.offload moves the buffers the graphs address, "
                                          "so they are dropped at every offload" if offload else "")
                     + "; a new shape runs eagerly")
    engines = needs_rollout(cfg)  # algo.loss_type=sft_loss: the trainer alone, no engine is placed
    rm = use_reward_model(cfg)
    if rm:
        m = cfg.reward.model
        notes.append(f"reward.model: {m.num_engines} {m.engine} reward engine(s) of {m.gpus_per_engine} GPU(s) "
                     + ("on the rollout engines' GPUs" if m.colocate else "on GPUs of their own")
                     + f", judging every sample ({m.mode})")
    served = use_teacher_engines(cfg)
    if served:
        d = cfg.algo.distill
        notes.append(f"algo.distill: {d.served.num_engines} {d.served.engine} teacher engine(s) of "
                     f"{d.served.gpus_per_engine} GPU(s) " + ("on the rollout engines' GPUs" if d.served.colocate
                                                            else "on GPUs of their own")
                     + ", scoring every sample's response tokens")
    if not engines:
        notes.append(f"algo.loss_type={cfg.algo.loss_type}: trains on the data set only; no rollout engines are "
                     "started (rollout.* sampling settings are unused)")
    placement = trainer_slots(cfg) + engine_slots(cfg) + reward_slots(cfg) + teacher_slots(cfg)
    samples = r.rollout_batch_size * r.n_samples_per_prompt

    params, mem = count_params(cfg.model), estimate(cfg)
    notes += list(mem.notes)
    if not mem.fits:
        notes.append(f"memory: estimated peak {mem.peak:.1f} GiB per GPU exceeds {mem.available:.1f} GiB "
                     "(more GPUs, TP/PP/EP, offload, recompute or a smaller max_tokens_per_gpu help)"
                     + lean_state_hint(cfg, mem))
    cost = predict(cfg, weight_sync(cfg), mem=mem)
    fraction = engine_fraction(cfg)
    notes += cost.get("warnings", [])
    return Plan(
        world_size=world, tp=p.tp, pp=p.pp, cp=p.cp, dp=dp, ep=p.ep, colocate=t.colocate,
        num_nodes=max(s.node for s in placement) + 1, gpus_per_node=cfg.hardware.gpus_per_node,
        trainer_gpus=world, rollout_gpus=r.num_gpus if engines else 0, num_engines=r.num_engines if engines else 0,
        gpus_per_engine=r.gpus_per_engine,
        nodes_per_engine=nodes_per_engine(placement),
        prompts_per_rollout=r.rollout_batch_size, samples_per_rollout=samples,
        steps_per_rollout=t.num_steps_per_rollout, global_batch_size=t.global_batch_size,
        samples_per_dp_rank=per_rank, micro_batches_per_step=micro,
        dynamic_batching=t.use_dynamic_batch_size, num_rollout=r.num_rollout,
        total_steps=r.num_rollout * t.num_steps_per_rollout, total_samples=r.num_rollout * samples,
        engine_fraction=fraction[0], engine_fraction_why=fraction[1] if ENGINES[r.engine].memory == "static_pool" and engines else "",
        offload_train=offload, offload_why=offload_why, offload_rollout=r.offload, weight_sync=weight_sync(cfg),
        weight_sync_bucket_mb=r.weight_sync_bucket_mb, env=actor_env_vars(cfg),
        placement=placement, ranks=rank_layout(cfg, dp), params_total=params.total,
        params_active=params.active, memory_gib={k: round(v, 3) for k, v in mem.by_role().items()},
        fits=mem.fits, memory=mem.to_dict(), choices=dict(choices or {}), notes=notes, cost=cost,
        backend_config=dict(cfg.train.megatron), reward_engines=cfg.reward.model.num_engines if rm else 0,
        reward_gpus=0 if not rm or cfg.reward.model.colocate else cfg.reward.model.num_engines * cfg.reward.model.gpus_per_engine,
        weight_sync_route=weight_sync_route(cfg, placement, weight_sync(cfg)) if engines else "",
        teacher_engines=cfg.algo.distill.served.num_engines if served else 0,
        teacher_gpus=0 if not served or cfg.algo.distill.served.colocate
        else cfg.algo.distill.served.num_engines * cfg.algo.distill.served.gpus_per_engine,
    )
