"""Layout rules: parallel sizes vs the model, GPUs vs the hardware and the cluster, engines vs nodes.
slime checks none of these before Megatron or Ray fail deep inside a worker (docs/config.md "Validation": the
gaps slime leaves)."""
from __future__ import annotations

from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.families import FAMILIES
from rlrun.config.kinds import BACKENDS, ENGINES
from rlrun.config.plan import engine_slots
from rlrun.config.registry import RULES as rule
from rlrun.config.schema import RunConfig


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tp_fits_model(m, tp: int) -> bool:
    """TP splits the heads, and the KV groups divide TP or TP divides them (megatron-core >= 0.16 replicates KV
    heads when TP is a multiple of the groups: glm4-9b's 2 groups at TP 4)."""
    g = m.num_query_groups
    return m.num_attention_heads % tp == 0 and (m.mla is not None or g % tp == 0 or tp % g == 0)


def _tps(cfg: RunConfig, world: int | None = None) -> list[int]:
    """The TP sizes every layout rule accepts for this model: the heads split, the KV groups fit, and (with
    `world`) TP x PP x CP divides the trainer's GPUs; the first six, as a printed hint."""
    p = cfg.parallelism
    ok = [t for t in _divisors(cfg.model.num_attention_heads) if _tp_fits_model(cfg.model, t)]
    if world is not None:
        ok = [t for t in ok if world % (t * p.pp * p.cp) == 0] or ok
    return ok[:6]


@rule
def world_size(cfg: RunConfig) -> Iterator[Problem]:
    p, world = cfg.parallelism, cfg.train.num_gpus
    mp = p.tp * p.pp * p.cp
    if world % mp:
        ok = [d for d in _divisors(world) if d <= 8 and _tp_fits_model(cfg.model, d)]
        yield Problem("parallelism.tp", f"trainer world size {world} (train.num_nodes {cfg.train.num_nodes} x "
                      f"gpus_per_node {cfg.train.gpus_per_node}) is not TP*PP*CP*DP: TP {p.tp} x PP {p.pp} x CP "
                      f"{p.cp} = {mp} does not divide {world}",
                      f"use a TP*PP*CP that divides {world} (e.g. tp in {ok} with pp=cp=1), or use a multiple of "
                      f"{mp} trainer GPUs", {"world": world, "tp": p.tp, "pp": p.pp, "cp": p.cp})


@rule
def heads_and_groups(cfg: RunConfig) -> Iterator[Problem]:
    m, tp = cfg.model, cfg.parallelism.tp
    if m.num_attention_heads % tp:
        yield Problem("parallelism.tp", f"{m.num_attention_heads} attention heads do not split over TP {tp}",
                      f"use tp in {_tps(cfg, cfg.train.num_gpus)}", tp)
    if m.mla is None and m.num_query_groups % tp and tp % m.num_query_groups:
        # megatron-core >= 0.16 replicates KV heads when TP is a multiple of the groups (glm4-9b: 2 groups, TP 4).
        g = m.num_query_groups
        yield Problem("parallelism.tp", f"{g} KV groups and TP {tp}: neither divides the other",
                      f"use a tp that divides {g} or is a multiple of it: tp in {_tps(cfg, cfg.train.num_gpus)}",
                      {"num_query_groups": g, "tp": tp})
    if m.num_attention_heads % m.num_query_groups:
        yield Problem("model.num_query_groups", f"{m.num_attention_heads} heads are not a multiple of "
                      f"{m.num_query_groups} KV groups", "check the model against its config.json "
                      "(num_key_value_heads)", m.num_query_groups)


@rule
def pipeline(cfg: RunConfig) -> Iterator[Problem]:
    m, pp = cfg.model, cfg.parallelism.pp
    uneven = {"num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"} & {
        k for k, v in cfg.train.megatron.items() if v is not None}
    # uneven stages (Megatron's --decoder-first/last-pipeline-num-layers): the backend's check_config
    # (BackendKind.passthrough_check) checks the split
    if m.num_layers % pp and not uneven:
        yield Problem("parallelism.pp", f"{m.num_layers} layers do not split into PP {pp} equal stages",
                      f"use pp in {_divisors(m.num_layers)[:6]}", pp)


@rule
def experts(cfg: RunConfig) -> Iterator[Problem]:
    m, p = cfg.model, cfg.parallelism
    fam = FAMILIES[m.family]
    if fam.moe and m.moe is None:
        yield Problem("model.moe", f"family {m.family} is a mixture of experts but model.moe is null",
                      "fill model.moe (num_experts, top_k, expert_ffn_hidden_size, ...)")
    if not fam.moe and m.moe is not None:
        yield Problem("model.moe", f"family {m.family} is dense but model.moe is set",
                      "set model.moe=null or model.family=qwen3_moe")
    if fam.mla != (m.mla is not None):
        mla = [n for n, f in FAMILIES.items() if f.mla]
        yield Problem("model.mla", f"MLA attention belongs to {', '.join(mla)} (family {m.family}, mla "
                      f"{'set' if m.mla else 'null'})", f"set model.mla for {', '.join(mla)} only")
    if m.moe is None:
        if p.ep > 1:
            yield Problem("parallelism.ep", f"expert parallel {p.ep} on dense model {m.name}",
                          "set parallelism.ep=1", p.ep)
        return
    e = m.moe
    per_stage = cfg.train.num_gpus // p.pp
    if e.num_experts % p.ep:  # the EPs offered also divide a stage's ranks (the rule below)
        ok = [d for d in _divisors(e.num_experts) if d <= 64 and per_stage % d == 0]
        yield Problem("parallelism.ep", f"{e.num_experts} experts do not split over EP {p.ep}",
                      f"use ep in {ok}", p.ep)
    if per_stage % p.ep:
        # Experts run with expert-tensor-parallel 1: the EP group comes out of the world / PP ranks.
        yield Problem("parallelism.ep", f"EP {p.ep} does not divide the {per_stage} ranks of a pipeline stage "
                      f"(world {cfg.train.num_gpus} / PP {p.pp})", f"use ep in {_divisors(per_stage)}", p.ep)
    if e.top_k > e.num_experts:
        yield Problem("model.moe.top_k", f"top_k {e.top_k} > num_experts {e.num_experts}",
                      f"set model.moe.top_k <= {e.num_experts}", e.top_k)
    if e.num_experts % e.n_group or e.topk_group > e.n_group:
        yield Problem("model.moe.n_group", f"{e.num_experts} experts in {e.n_group} groups with top-{e.topk_group} "
                      "groups is not a valid grouping", "n_group must divide num_experts and topk_group <= n_group",
                      {"n_group": e.n_group, "topk_group": e.topk_group})
    if e.first_k_dense >= m.num_layers:
        yield Problem("model.moe.first_k_dense", f"{e.first_k_dense} dense layers leave no MoE layer of "
                      f"{m.num_layers}", f"set model.moe.first_k_dense < {m.num_layers}", e.first_k_dense)


@rule
def gpus_and_nodes(cfg: RunConfig) -> Iterator[Problem]:
    t, r, hw = cfg.train, cfg.rollout, cfg.hardware
    if t.gpus_per_node > hw.gpus_per_node:
        yield Problem("train.gpus_per_node", f"{t.gpus_per_node} trainer GPUs per node, but a {hw.name} node has "
                      f"{hw.gpus_per_node}", f"set train.gpus_per_node <= {hw.gpus_per_node} and use train.num_nodes "
                      f"for more", t.gpus_per_node)
    if r.num_gpus % r.gpus_per_engine:
        yield Problem("rollout.num_gpus", f"{r.num_gpus} rollout GPUs do not split into engines of "
                      f"{r.gpus_per_engine}", f"use a multiple of {r.gpus_per_engine} rollout GPUs or a "
                      f"gpus_per_engine in {_divisors(r.num_gpus)}", r.num_gpus)
        return
    g = r.gpus_per_engine
    if g > hw.gpus_per_node:
        # An engine wider than a node runs as one SGLang process per node (--nnodes k --node-rank i,
        # tp_size / k GPUs each: slime's _compute_server_args, nnodes = gpus_per_engine // num_gpus_per_node),
        # so it must take whole nodes.
        if g % hw.gpus_per_node:
            yield Problem("rollout.gpus_per_engine", f"an engine of {g} GPUs is wider than a {hw.name} node of "
                          f"{hw.gpus_per_node} GPUs but not a whole number of nodes: an engine spanning nodes runs "
                          f"one engine process per node, each on the same number of GPUs",
                          f"set rollout.gpus_per_engine <= {hw.gpus_per_node} or to a multiple of it "
                          f"({hw.gpus_per_node * (g // hw.gpus_per_node)} or {hw.gpus_per_node * (g // hw.gpus_per_node + 1)})",
                          g)
            return
        if ENGINES[r.engine].max_gpus_per_engine is not None:
            return  # one-device engines: rollout_engine reports gpus_per_engine
        if not ENGINES[r.engine].multi_node:
            multi = [e for e, spec in ENGINES.items() if spec.multi_node]
            yield Problem("rollout.gpus_per_engine", f"an engine of {g} GPUs spans {g // hw.gpus_per_node} nodes, "
                          f"but the {r.engine} engine runs on one node", f"set rollout.gpus_per_engine <= "
                          f"{hw.gpus_per_node} or rollout.engine={' or '.join(multi)}", g)
            return
    if t.colocate:
        if r.num_gpus != t.num_gpus:
            yield Problem("rollout.num_gpus", f"colocated engines use the trainer's {t.num_gpus} GPUs, got "
                          f"{r.num_gpus}", "set rollout.num_gpus=null (derived) or train.colocate=false", r.num_gpus)
        elif (t.gpus_per_node % g) if g <= t.gpus_per_node else (g % t.gpus_per_node):
            yield Problem("rollout.gpus_per_engine", f"colocated engines of {g} GPUs would straddle "
                          f"nodes of {t.gpus_per_node} trainer GPUs unevenly", f"use a gpus_per_engine that divides "
                          f"{t.gpus_per_node} or is a multiple of it (an engine of whole trainer nodes)", g)
            return
    if t.num_nodes > cfg.cluster.num_nodes:
        yield Problem("cluster.num_nodes", f"the trainer needs {t.num_nodes} nodes, the cluster has "
                      f"{cfg.cluster.num_nodes}", f"set cluster.num_nodes={t.num_nodes} or fewer train.num_nodes",
                      cfg.cluster.num_nodes)
        return
    slots = engine_slots(cfg)
    needed = max([s.node for s in slots] + [t.num_nodes - 1]) + 1
    if needed > cfg.cluster.num_nodes:
        yield Problem("cluster.num_nodes", f"trainer ({t.num_gpus} GPUs) and rollout ({r.num_gpus} GPUs, "
                      f"disaggregated) need {needed} node(s) of {hw.gpus_per_node} GPUs, the cluster has "
                      f"{cfg.cluster.num_nodes}", f"set cluster.num_nodes={needed}, fewer rollout.num_gpus, or "
                      "train.colocate=true", cfg.cluster.num_nodes)


def _backends_with(test=None, **want) -> str:
    """The backends whose spec has every `want` value (and passes `test`), for a fix ("torch or megatron")."""
    names = [b for b, spec in BACKENDS.items()
             if all(getattr(spec, k) == v for k, v in want.items()) and (test is None or test(spec))]
    return " or ".join(names) or "another backend"


@rule
def backends_vs_hardware(cfg: RunConfig) -> Iterator[Problem]:
    t, r, hw, p = cfg.train, cfg.rollout, cfg.hardware, cfg.parallelism
    backend = BACKENDS[t.backend]
    if not backend.model_parallel and (p.tp, p.pp, p.cp, p.ep) != (1, 1, 1, 1):
        mp = _backends_with(model_parallel=True)
        yield Problem("train.backend", f"the {t.backend} backend is data-parallel only; TP {p.tp} PP {p.pp} CP {p.cp} "
                      f"EP {p.ep} need {mp}", f"set train.backend={mp} or parallelism=tp1",
                      {"tp": p.tp, "pp": p.pp, "cp": p.cp, "ep": p.ep})
    if hw.vendor == "cpu":
        if backend.needs_gpu:
            yield Problem("train.backend", f"{t.backend} needs GPUs; hardware is cpu",
                          f"set train.backend={_backends_with(needs_gpu=False)} or pick GPU hardware "
                          "(hardware=h100, mi300x, ...)", t.backend)
        if ENGINES[r.engine].needs_gpu:
            cpu = next(e for e, spec in ENGINES.items() if not spec.needs_gpu)
            yield Problem("rollout.engine", f"{r.engine} needs GPUs; hardware is cpu",
                          f"set rollout.engine={cpu} or pick GPU hardware", r.engine)
    if not backend.bf16_grads and not t.fp32_grads:
        yield Problem("train.fp32_grads", f"the {t.backend} backend trains fp32 weights, so its grads are fp32; bf16 "
                      f"grads are a {_backends_with(bf16_grads=True)}-backend setting",
                      f"set train.fp32_grads=true or train.backend={_backends_with(bf16_grads=True)}", False)
    if cfg.optim.state_dtype not in backend.state_dtypes:
        other = _backends_with(lambda spec: cfg.optim.state_dtype in spec.state_dtypes)
        yield Problem("optim.state_dtype", f"the {t.backend} backend keeps its Adam moments in "
                      f"{' or '.join(backend.state_dtypes)}; {cfg.optim.state_dtype} Adam moments are a "
                      f"{other}-backend setting",
                      f"set optim.state_dtype={backend.state_dtypes[0]} or train.backend={other}",
                      cfg.optim.state_dtype)
    elif hw.vendor != "cuda" and cfg.optim.state_dtype != "fp32":
        yield Problem("optim.state_dtype", f"bf16 Adam moments need rlrun's fused AdamW kernel, which is verified on "
                      f"NVIDIA GPUs only; this run's hardware is {hw.vendor}",
                      "set optim.state_dtype=fp32 (or run on NVIDIA hardware)", cfg.optim.state_dtype)
    if t.cuda_graphs:
        if not backend.cuda_graphs or hw.vendor != "cuda":
            yield Problem("train.cuda_graphs", f"CUDA graphs are a {_backends_with(cuda_graphs=True)}-backend feature "
                          f"on NVIDIA GPUs; this run "
                          f"has train.backend={t.backend} on {hw.vendor} hardware",
                          "set train.cuda_graphs=false", True)
        elif (p.tp, p.pp, p.cp, p.ep) != (1, 1, 1, 1):
            yield Problem("train.cuda_graphs", f"CUDA graphs capture one GPU's micro-batch without model-parallel "
                          f"communication; this layout has TP {p.tp} PP {p.pp} CP {p.cp} EP {p.ep}",
                          "set train.cuda_graphs=false or parallelism=tp1 (data parallelism is fine)",
                          {"tp": p.tp, "pp": p.pp, "cp": p.cp, "ep": p.ep})
        elif cfg.model.moe is not None:
            yield Problem("train.cuda_graphs", "MoE layers size their token dispatch on the host for every "
                          "micro-batch (tokens per expert), which a CUDA graph cannot capture",
                          "set train.cuda_graphs=false", True)
        elif t.recompute.granularity is not None:
            yield Problem("train.cuda_graphs", "activation recompute saves and restores RNG states, which a CUDA "
                          "graph capture does not allow; CUDA graphs need the activations kept",
                          "set train.cuda_graphs=false or train.recompute.granularity=null", t.recompute.granularity)
    if hw.vendor == "rocm" and t.gradient_accumulation_fusion:
        yield Problem("train.gradient_accumulation_fusion", "gradient-accumulation fusion needs apex's CUDA "
                      "kernels (absent on ROCm images) or torch's mixed-dtype addmm, which is verified on CUDA only", "set train.gradient_accumulation_fusion=null "
                      "(the AMD default: off)", True)
