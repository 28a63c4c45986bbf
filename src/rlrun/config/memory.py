"""Per-GPU memory estimate (REFERENCE.md §8; Megatron-LM's theoretical_memory_usage is the reference).
bf16 weights 2 B/param, fp32 main grads 4 B/param, Adam (fp32 master + m + v) 12 B/param sharded over DP
(distributed optimizer); the torch backend keeps fp32 weights and unsharded Adam. Activations: Korthikanti
et al.'s 34*h bytes per token per layer (flash attention, sequence parallel divides by TP), only the layer
inputs when full recompute is on, plus fp32 logits. Engines: SGLang reserves mem_fraction_static of the GPU
for weights + KV cache. Colocated peak = the larger of the training and rollout phases, where a side that
offloads leaves the GPU during the other side's phase. Estimates, not measurements: ~10-20% is typical."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from math import ceil

from rlrun.config.params import ParamCount, count_params
from rlrun.config.schema import RunConfig

GiB = 1024 ** 3
ENGINE_OVERHEAD_GIB = 1.0  # CUDA context, graphs and sampling buffers outside SGLang's static pool


@dataclass(frozen=True)
class Memory:
    trainer_params_per_gpu: int
    trainer_weights: float      # GiB per GPU, here and below
    trainer_grads: float
    trainer_optimizer: float
    trainer_activations: float
    trainer_total: float
    engine_weights: float
    engine_kv_cache: float
    engine_total: float
    kv_bytes_per_token: int     # per GPU of an engine
    kv_tokens: int              # KV-cache capacity of one engine, tokens
    kv_sequences: int           # ... in sequences of max prompt + response
    peak: float                 # per GPU, both roles, offload taken into account
    available: float
    fits: bool
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d

    def by_role(self) -> dict[str, float]:
        return {"trainer": self.trainer_total, "engine": self.engine_total, "peak": self.peak,
                "available": self.available}


def trainer_params_per_gpu(cfg: RunConfig, pc: ParamCount) -> int:
    """Parameters on the busiest trainer rank: embedding and lm head split over TP on the first/last
    stage, layers/PP per stage split over TP, routed experts split over EP (expert-tensor-parallel 1)."""
    p = cfg.parallelism
    stage_layers_dense = ceil(pc.num_dense_layers / p.pp)
    stage_layers_moe = ceil(pc.num_moe_layers / p.pp)
    experts = cfg.model.moe.num_experts // p.ep if cfg.model.moe else 0
    layers = (stage_layers_dense * pc.dense_layer + stage_layers_moe * pc.moe_layer_shared) // p.tp
    layers += stage_layers_moe * experts * pc.expert
    # With PP 1 one rank holds both ends; tied embeddings still need an output copy on the last stage.
    ends = pc.embedding + pc.lm_head if p.pp == 1 else max(pc.embedding, pc.lm_head or pc.embedding)
    return layers + ends // p.tp + pc.final_norm


def _activations(cfg: RunConfig, tokens: int) -> float:
    m, p, t = cfg.model, cfg.parallelism, cfg.train
    h, tp = m.hidden_size, p.tp
    shard = tp if p.sequence_parallel else 1
    layers = ceil(m.num_layers / p.pp)
    per_layer = 34 * h * tokens / tp  # bytes; SP also shards the norm/dropout parts, folded in here
    if t.recompute.granularity == "full":
        stored = layers * 2 * h * tokens / shard + per_layer  # layer inputs + one layer being recomputed
    else:
        stored = layers * per_layer
    logits = tokens * m.vocab_size * 4 / tp  # fp32 logits for the log-prob / loss
    return stored + logits


def _tokens_per_micro_batch(cfg: RunConfig, sample_tokens: int) -> int:
    t = cfg.train
    if t.use_dynamic_batch_size and t.max_tokens_per_gpu:
        return t.max_tokens_per_gpu
    return t.micro_batch_size * ceil(sample_tokens / cfg.parallelism.cp)


def kv_bytes_per_token(cfg: RunConfig) -> int:
    m, tp = cfg.model, cfg.rollout.gpus_per_engine
    if m.mla is not None:  # SGLang caches the compressed latent + rope key, replicated on every TP rank
        return m.num_layers * (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) * 2
    heads = max(ceil(m.num_query_groups / tp), 1)  # KV heads are replicated when TP > groups
    return 2 * m.num_layers * heads * m.head_dim * 2


def estimate(cfg: RunConfig) -> Memory:
    pc = count_params(cfg.model)
    t, r, hw = cfg.train, cfg.rollout, cfg.hardware
    # A sequence is max prompt + response; without a prompt-length filter only the response is known.
    sample_tokens = (cfg.data.max_prompt_len or 0) + r.max_response_len
    dp = max(t.num_gpus // (cfg.parallelism.tp * cfg.parallelism.pp * cfg.parallelism.cp), 1)
    n = trainer_params_per_gpu(cfg, pc)
    critic = 2 if cfg.algo.advantage_estimator == "ppo" else 1  # PPO's critic lives on the actor's GPUs
    notes = []
    if cfg.data.max_prompt_len is None:
        notes.append("KV sequences count responses only (data.max_prompt_len is null)")
    if critic == 2:
        notes.append("ppo: trainer memory includes a critic of the actor's size")
    if t.backend == "megatron":
        weights, grads, optim = 2 * n, 4 * n, 12 * n / dp
    else:
        weights, grads, optim = 4 * n, 4 * n, 8 * n
    act = _activations(cfg, _tokens_per_micro_batch(cfg, sample_tokens))
    trainer = [critic * weights / GiB, critic * grads / GiB, critic * optim / GiB, act / GiB]

    kv_tok = kv_bytes_per_token(cfg)
    engine_weights = 2 * pc.total / r.gpus_per_engine / GiB
    if r.engine == "sglang":
        pool = r.mem_fraction_static * hw.memory_gib
        kv = max(pool - engine_weights, 0.0)
        engine_total = pool + ENGINE_OVERHEAD_GIB
    else:  # the hf engine allocates KV for the sequences it runs, no static pool
        seqs = ceil(r.rollout_batch_size * r.n_samples_per_prompt / max(r.num_engines, 1))
        kv = seqs * sample_tokens * kv_tok / GiB
        engine_total = engine_weights + kv
    kv_tokens = int(kv * GiB // kv_tok) if kv_tok else 0
    if kv <= 0:
        notes.append("engine weights exceed mem_fraction_static of the GPU: no room for a KV cache")

    trainer_total = sum(trainer)
    if t.colocate:
        train_phase = trainer_total + (0 if r.offload else engine_total)
        rollout_phase = engine_total + (0 if t.offload else trainer_total)
        peak = max(train_phase, rollout_phase)
    else:
        peak = max(trainer_total, engine_total)
    return Memory(
        trainer_params_per_gpu=n, trainer_weights=trainer[0], trainer_grads=trainer[1],
        trainer_optimizer=trainer[2], trainer_activations=trainer[3], trainer_total=trainer_total,
        engine_weights=engine_weights, engine_kv_cache=kv, engine_total=engine_total,
        kv_bytes_per_token=kv_tok, kv_tokens=kv_tokens, kv_sequences=kv_tokens // max(sample_tokens, 1),
        peak=peak, available=hw.memory_gib, fits=peak <= hw.memory_gib, notes=tuple(notes),
    )
