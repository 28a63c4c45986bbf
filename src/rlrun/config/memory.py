"""Per-GPU memory estimate (docs/config.md "The plan"; Megatron-LM's megatron/training/theoretical_memory_usage.py
is the reference).

Static state: bf16 weights 2 B/param, fp32 main grads 4 B/param (2 with train.fp32_grads=false), Adam
(fp32 master + m + v) 12 B/param (8 with optim.state_dtype=bf16) sharded over DP (distributed
optimizer). The torch backend keeps fp32 weights, fp32 grads and unsharded Adam m + v (16 B/param);
its autocast also keeps bf16 copies of the weights for backward (~2 B/param, not counted), and its
layer activations (transformers modules, fp32 RMSNorm internals) are not calibrated.

Activations: the per-layer terms of Korthikanti et al. 2022 ("Reducing activation recomputation"), redone
for rlrun's megatron layer spec (local modules, no Transformer Engine, SDPA/flash attention, SwiGLU,
dropout 0). Bytes per token per layer on one GPU, bf16, with T = TP and S = TP under sequence parallelism
(else 1); q, k, v, o = query, key, value and attention-output widths (heads x head dim; MLA: nope + rope
for q and k, v_head_dim for v and o); f = ffn hidden size:
  norms          8h / S   input norm's input and output (= qkv input), pre-MLP norm's input and output
                          (= fc1 input); post-norms (GLM-4) add their inputs, 4h / S
  attention      2(q+k+v) / T   qkv projection output (split views keep it alive: q/k norms and v)
                 2(q+k) / T     q and k after rotary (saved by flash attention; rope saves only cos/sin)
                 2o / T         attention output (flash attention's output = linear_proj input);
                                no s^2 softmax term, flash attention keeps only a log-sum-exp per row
  SwiGLU MLP     10f / T  fc1 output (gate and up, 4f), silu(gate) 2f, up + glu_linear_offset 2f (a new
                          tensor), product 2f (= fc2 input); a non-gated MLP keeps 4f
  MoE layers     routed experts (expert-tensor-parallel 1, not split by TP): top_k x 10 x expert ffn
                 + 2h x top_k for the permuted expert inputs; the shared expert's 10 x ffn / T
For Qwen3-1.7B (h 2048 = q, k = v 1024, f 6144) that is 47h per token per layer; the old 34h term
(a 4h non-gated MLP with fused kernels) missed 13h. Full recompute keeps the input of every recompute
group (2h / S per token) plus the full activations of one group while it is recomputed; method=block
recomputes the first num_layers layers of a stage and stores the rest. With PP > 1 the first stage
holds PP micro-batches in flight (1F1B); the last stage holds one plus the logits. The final norm adds
4h / S per token.

Logits, megatron backend: none are kept (rlrun.algo.token_stats.linear_logp_entropy builds them in
chunks of 512 MiB of fp32 and rebuilds them in the backward). Its peak, at the start of the backward
with every activation still stored: a chunk's fp32 logits and softmax (2 x 512 MiB) and its bf16
gradient (256 MiB), plus the output weight's gradient as an fp32 accumulator and its bf16 result
(6 bytes x vocab / TP x h).
Logits, torch backend, per token per vocab entry, 20 bytes: the bf16 logits 2, the gathered response
rows 2, their fp32 log_softmax 4 (+4 for its output), and the entropy metric's transient fp32 softmax
and softmax * z, 8 (computed without grad even when algo.entropy_coef is 0). That peak (end of forward,
inside the loss) is added to all stored activations.

Calibrated against H100 measurements (docs/benchmarks.md; 2026-11-22): Qwen3-1.7B, 4096 tokens, TP 1,
no recompute: measured 43.0 GiB peak, estimated 42.1 (before the chunked logits: 52.0 and 50.7; the
compiled-SwiGLU run saved 2.6 GiB = the 4f of silu output and offset copy, which confirms the 10f term);
Qwen3-4B with full recompute: measured 71.8 GiB, estimated 72.2 (before: out of memory on 79.2, estimated
80.3). Not counted: memory outside PyTorch's allocator (CUDA context, cuBLAS/cuDNN, NCCL), measured
2.1 GiB for one megatron rank on the H100 (0.75 for transformers).

Engines: SGLang reserves mem_fraction_static of the GPU for weights + KV cache. Colocated peak = the
largest of the training, rollout and push phases, where a side that offloads leaves the GPU during the other
side's phase (the push: the trainer without activations, the engines' weights, two staged buckets). Estimates, not measurements: within ~5% on the calibrated configs, ~10-20% elsewhere."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from math import ceil

from rlrun.config.kinds import BACKENDS, ENGINES, TRANSPORTS, chosen_transport, needs_rollout, use_critic, use_teacher_engines
from rlrun.config.params import ParamCount, count_params, lora_params, norms_per_layer
from rlrun.config.schema import RunConfig
from rlrun.config.sizes import dp_size, known_sample_tokens

GiB = 1024 ** 3
ENGINE_OVERHEAD_GIB = 1.0  # CUDA context, graphs and sampling buffers outside SGLang's static pool
# A GPU trainer rank's memory outside PyTorch's allocator (CUDA context, cuBLAS/cuDNN workspaces, NCCL
# communicators): 2.06 GiB measured for one megatron rank on the H100 (0.75 for a bare transformers
# process). It stays while the trainer is offloaded, so both phases of a colocated GPU carry it.
TRAINER_OVERHEAD_GIB = 2.0


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
    peak: float                 # per GPU, both roles, offload and runtime overheads taken into account
    available: float
    fits: bool
    notes: tuple[str, ...] = ()
    trainer_overhead: float = 0.0  # outside PyTorch's allocator, in `peak` but not in trainer_total

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


BF16 = 2
LOGIT_BYTES = 2 + 2 + 4 + 4 + 8  # torch backend, per token per vocab entry: see the module docstring
LOGIT_CHUNK_BYTES = 512 * 2**20  # fp32 logits per chunk of the megatron backend's linear_logp_entropy


def _attention_widths(m) -> tuple[int, int, int, int]:
    """(q, k, v, o) widths of one layer, all heads."""
    if m.mla is not None:
        qk = m.num_attention_heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim)
        v = m.num_attention_heads * m.mla.v_head_dim
        return qk, qk, v, v
    kv = m.num_query_groups * m.head_dim
    return m.num_attention_heads * m.head_dim, kv, kv, m.num_attention_heads * m.head_dim


def layer_bytes_per_token(cfg: RunConfig, moe_layer: bool = False) -> float:
    """Activation bytes one layer stores per token on one GPU for backward (terms in the module docstring)."""
    m, p = cfg.model, cfg.parallelism
    h, tp = m.hidden_size, p.tp
    shard = tp if p.sequence_parallel else 1
    q, k, v, o = _attention_widths(m)
    # KV heads are replicated when TP exceeds the query groups (megatron-core), so k and v shard at most by groups.
    kv_tp = min(tp, m.num_query_groups) if m.mla is None else tp
    norms = (8 + (4 if m.post_norms else 0)) * h / shard
    attention = BF16 * ((2 * q + o) / tp + (2 * k + v) / kv_tp)  # q, k twice: projection output and rotated
    glu = 10 if m.swiglu else 4  # bytes per ffn channel, see the docstring
    if moe_layer:
        e = m.moe
        mlp = e.top_k * (glu * e.expert_ffn_hidden_size + BF16 * h) + glu * e.shared_expert_ffn_hidden_size / tp
    else:
        mlp = glu * m.ffn_hidden_size / tp
    return norms + attention + mlp


def _activations(cfg: RunConfig, tokens: int) -> float:
    m, p, r = cfg.model, cfg.parallelism, cfg.train.recompute
    tp_sp = p.tp if p.sequence_parallel else 1
    n_moe = 0 if m.moe is None else m.num_layers - m.moe.first_k_dense
    stage_moe = ceil(n_moe / p.pp)
    stage_dense = ceil(m.num_layers / p.pp) - stage_moe
    per_layer = [layer_bytes_per_token(cfg)] * stage_dense  # model order: first_k_dense layers come first
    if stage_moe:
        per_layer += [layer_bytes_per_token(cfg, moe_layer=True)] * stage_moe
    layer_input = BF16 * m.hidden_size / tp_sp
    if r.granularity == "full":
        group = r.num_layers or 1
        if r.method == "block":  # the first `group` layers recompute, the rest store everything
            stored = group * layer_input + sum(per_layer[group:]) + max(per_layer[:group], default=0)
        else:  # uniform: every group of `group` layers keeps its input, one group is recomputed at a time
            stored = ceil(len(per_layer) / group) * layer_input + sum(per_layer[:group])
    else:  # selective recompute targets the s^2 attention core, which flash attention does not store
        stored = sum(per_layer)
    stored *= tokens
    final_norm = 2 * layer_input * tokens
    if BACKENDS[cfg.train.backend].memory == "sharded":  # chunked fused logits + loss
        logits = 2.5 * LOGIT_CHUNK_BYTES + 6 * m.vocab_size / p.tp * m.hidden_size
    else:
        logits = tokens * m.vocab_size / p.tp * LOGIT_BYTES
    # 1F1B: the first stage holds PP micro-batches in flight, the last one micro-batch plus the logits.
    return max(p.pp * stored, stored + final_norm + logits)


def _tokens_per_micro_batch(cfg: RunConfig, sample_tokens: int) -> int:
    t = cfg.train
    if t.use_dynamic_batch_size and t.max_tokens_per_gpu:
        # a sample above the budget trains alone (batching.py)
        return max(t.max_tokens_per_gpu, ceil(known_sample_tokens(cfg) / cfg.parallelism.cp))
    return t.micro_batch_size * ceil(sample_tokens / cfg.parallelism.cp)


FP8_BLOCK = 128  # rlrun.rollout.fp8.BLOCK: one float32 scale per 128 x 128 block of an FP8 weight


def engine_weight_bytes(m, pc, fp8: bool) -> float:
    """Bytes of one engine's weights: bf16 (2 B/param), or with rollout.fp8 the attention projections and the
    dense and expert MLP weights in FP8 (1 B/param + 4 B per 128 x 128 block of scales, rlrun.rollout.fp8) and the
    rest (embeddings, output layer, norms, routers) in bf16."""
    if not fp8:
        return 2.0 * pc.total
    h = m.hidden_size
    norms = pc.final_norm + (norms_per_layer(m) + (2 * m.head_dim if m.qk_layernorm else 0)) * m.num_layers
    routers = (m.moe.num_experts * h) * pc.num_moe_layers if m.moe is not None else 0
    kept = pc.embedding + pc.lm_head + norms + routers
    quantized = pc.total - kept
    return 2.0 * kept + quantized * (1.0 + 4.0 / FP8_BLOCK ** 2)


def kv_bytes_per_token(cfg: RunConfig) -> int:
    m, tp = cfg.model, cfg.rollout.gpus_per_engine
    if m.mla is not None:  # SGLang caches the compressed latent + rope key, replicated on every TP rank
        return m.num_layers * (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) * 2
    heads = max(ceil(m.num_query_groups / tp), 1)  # KV heads are replicated when TP > groups
    return 2 * m.num_layers * heads * m.head_dim * 2


def _critic_copies(cfg: RunConfig) -> int:
    return 2 if use_critic(cfg) else 1  # PPO's critic lives on the actor's GPUs


def _megatron_state(n: float, dp: int, fp32_grads: bool, state_dtype: str) -> tuple[float, float]:
    """(grad, optimizer) bytes per GPU of the megatron backend: fp32 or bf16 grad buffers; fp32
    master weights + the two Adam moments (fp32 or bf16), sharded over DP. The fused AdamW kernel
    (rlrun.train.megatron.adam) reads bf16 grads as they are: no fp32 copy."""
    moments = 2 * (2 if state_dtype == "bf16" else 4)
    return (4 if fp32_grads else 2) * n, (4 + moments) * n / dp


def cpu_offload_fraction(cfg: RunConfig) -> float:
    """The share of the megatron optimizer's state train.megatron.optimizer_cpu_offload keeps in host memory:
    optimizer_offload_fraction (OptimizerConfig's default 0.0 when absent; `rlrun import slime` writes Megatron-LM's
    command-line default 1.0 with the flag)."""
    m = cfg.train.megatron
    if not m.get("optimizer_cpu_offload"):
        return 0.0
    frac = m.get("optimizer_offload_fraction", 0.0)
    return min(max(float(frac), 0.0), 1.0) if isinstance(frac, (int, float)) and not isinstance(frac, bool) else 0.0


def lean_state_hint(cfg: RunConfig, mem: Memory) -> str:
    """For a config whose memory does not fit: what bf16 Adam moments and bf16 grads would save
    (megatron on NVIDIA GPUs); "" when they are already on or not available."""
    t = cfg.train
    spec = BACKENDS[t.backend]
    if spec.memory != "sharded" or "bf16" not in spec.state_dtypes or cfg.hardware.vendor != "cuda":
        return ""
    flags = [flag for flag, off in (("optim.state_dtype=bf16", cfg.optim.state_dtype == "fp32"),
                                    ("train.fp32_grads=false", t.fp32_grads)) if off]
    if not flags:
        return ""
    n, dp = mem.trainer_params_per_gpu, dp_size(cfg)
    now, lean = _megatron_state(n, dp, t.fp32_grads, cfg.optim.state_dtype), _megatron_state(n, dp, False, "bf16")
    saved = sum(now) - sum(lean)
    return f"; {' '.join(flags)} would save {_critic_copies(cfg) * saved / GiB:.1f} GiB (fp32 master weights stay)"


def estimate(cfg: RunConfig) -> Memory:
    """Per-GPU memory of the run as it will run: the trainer offloaded or resident as trainer_offload decides."""
    return _estimate(cfg, trainer_offload(cfg)[0])


def engine_fraction(cfg: RunConfig) -> tuple[float, str]:
    """(the share of a GPU a static-pool engine reserves for weights + KV cache, why): rollout.mem_fraction_static
    when set; null (auto) = hardware.defaults.mem_fraction_static, except for a colocated run whose trainer would be
    offloaded (train.offload auto) only because the engine's pool is larger than the rollout needs: then the largest
    fraction that keeps the trainer resident, provided its KV cache still holds every sample of a rollout at full
    length (a prompt as long as data.max_prompt_len, else as the response) on each engine. The rollout then never
    queues or retracts for lack of KV, and the trainer never leaves the GPU (the engines release only their KV
    cache around training): the offload phase shrinks to the engine's release and resume."""
    r, t, hw = cfg.rollout, cfg.train, cfg.hardware
    if r.mem_fraction_static is not None:
        return r.mem_fraction_static, "set: rollout.mem_fraction_static"
    base = hw.defaults.mem_fraction_static
    why = f"auto: hardware.defaults.mem_fraction_static ({hw.name})"
    reward = cfg.reward.model
    if not (t.colocate and t.offload is None and hw.vendor != "cpu" and ENGINES[r.engine].memory == "static_pool") \
            or (reward.checkpoint is not None and reward.colocate) \
            or (use_teacher_engines(cfg) and cfg.algo.distill.served.colocate):  # a judge / teacher on the same GPUs
        return base, why
    mem = _estimate(cfg, False, base)
    if mem.peak * (1 + ESTIMATE_ERROR) <= mem.available:
        return base, why + ", the trainer stays resident beside it"
    frac = _resident_fraction(mem)
    if frac is None or frac >= base:
        return base, why
    per_engine = ceil(r.over_sampling_batch_size * r.n_samples_per_prompt / max(r.num_engines, 1))
    tokens = per_engine * ((cfg.data.max_prompt_len or r.max_response_len) + r.max_response_len)
    small = _estimate(cfg, False, frac)
    if small.kv_tokens < tokens:
        return base, (f"{why}: a pool of {frac:g} would keep the trainer resident but hold {small.kv_tokens:,} KV tokens "
                      f"of the {tokens:,} a rollout's {per_engine} samples per engine need at full length")
    return frac, (f"auto: {frac:g} (of hardware.defaults.mem_fraction_static {base:g}): the largest pool that keeps the "
                  f"trainer resident; its {small.kv_tokens:,} KV tokens hold a rollout's {per_engine} samples per engine "
                  f"at full length ({tokens:,})")


def _resident_fraction(mem: Memory) -> float | None:
    """The largest static-pool fraction (rounded down to 0.01) at which a resident trainer and its engine fit on a
    GPU with the estimate's error to spare, or None when no pool larger than the engine's weights does."""
    frac = (mem.available / (1 + ESTIMATE_ERROR) - ENGINE_OVERHEAD_GIB - mem.trainer_overhead
            - mem.trainer_total) / mem.available
    frac = int(frac * 100) / 100
    fits = mem.peak - mem.engine_total + frac * mem.available + ENGINE_OVERHEAD_GIB \
        <= mem.available / (1 + ESTIMATE_ERROR)
    return frac if frac * mem.available > mem.engine_weights and fits else None


def _estimate(cfg: RunConfig, offload_train: bool, fraction: float | None = None) -> Memory:
    pc = count_params(cfg.model)
    t, r, hw = cfg.train, cfg.rollout, cfg.hardware
    # A sequence is max prompt + response; without a prompt-length filter only the response is known.
    sample_tokens = (cfg.data.max_prompt_len or 0) + r.max_response_len
    dp = dp_size(cfg)
    n = trainer_params_per_gpu(cfg, pc)
    critic = _critic_copies(cfg)
    notes = []
    if cfg.data.max_prompt_len is None:
        notes.append("KV sequences count responses only (data.max_prompt_len is null)")
    if critic == 2:
        notes.append(f"{cfg.algo.advantage_estimator}: trainer memory includes a critic of the actor's size")
    if BACKENDS[t.backend].memory == "sharded":
        weights = 2 * n
        grads, optim = _megatron_state(n, dp, t.fp32_grads, cfg.optim.state_dtype)
        host = cpu_offload_fraction(cfg)
        if host:
            optim *= 1 - host
            notes.append(f"train.megatron.optimizer_cpu_offload: {host:.0%} of the optimizer state (fp32 master + "
                         "Adam moments) is in host memory (megatron-core's hybrid device optimizer)")
    else:
        weights, grads, optim = 4 * n, 4 * n, 8 * n
    if cfg.model.lora.rank:  # LoRA: the base weights are frozen, grads and Adam state cover the adapter only
        a = lora_params(cfg.model)
        weights, grads, optim = weights + weights / max(n, 1) * a, grads / max(n, 1) * a, optim / max(n, 1) * a
        notes.append(f"model.lora: grads and optimizer state of the {a:,} adapter parameters only (base frozen)")
    act = _activations(cfg, _tokens_per_micro_batch(cfg, sample_tokens))
    trainer = [critic * weights / GiB, critic * grads / GiB, critic * optim / GiB, act / GiB]

    kv_tok = kv_bytes_per_token(cfg)
    engine_weights = engine_weight_bytes(cfg.model, pc, r.fp8) / r.gpus_per_engine / GiB
    if ENGINES[r.engine].memory == "static_pool":
        pool = (engine_fraction(cfg)[0] if fraction is None else fraction) * hw.memory_gib
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
    overhead = 0.0 if hw.vendor == "cpu" else TRAINER_OVERHEAD_GIB
    # the weight push (after the block: activations freed, weights, grads and optimizer state still there) stages up
    # to two buckets on each trainer rank (rlrun.rollout.engines.group.push_tensors' double buffering); a file
    # transport writes from host memory and leaves first
    from_memory = needs_rollout(cfg) and not TRANSPORTS[chosen_transport(cfg)].file
    staging = 2 * r.weight_sync_bucket_mb / 1024 if from_memory else 0.0
    at_push = trainer_total - trainer[3] + overhead + staging
    if t.colocate:
        # engines that lend their memory (rollout.offload) release everything next to an offloading trainer, only
        # their KV cache next to a resident one (rlrun.parts.offload): weights and runtime stay
        weights_and_runtime = engine_weights + (ENGINE_OVERHEAD_GIB if ENGINES[r.engine].memory == "static_pool"
                                                else 0.0)
        kept = 0.0 if offload_train else weights_and_runtime
        train_phase = trainer_total + overhead + (kept if r.offload else engine_total)
        rollout_phase = engine_total + overhead + (0 if offload_train else trainer_total)
        # the push lands in the engines' weights, resumed by then when they lent them (Offload.training)
        push_phase = at_push + (weights_and_runtime if r.offload else engine_total) if from_memory else 0.0
        peak = max(train_phase, rollout_phase, push_phase)
    else:
        peak = max(trainer_total + overhead, at_push, engine_total)
    return Memory(
        trainer_params_per_gpu=n, trainer_weights=trainer[0], trainer_grads=trainer[1],
        trainer_optimizer=trainer[2], trainer_activations=trainer[3], trainer_total=trainer_total,
        engine_weights=engine_weights, engine_kv_cache=kv, engine_total=engine_total,
        kv_bytes_per_token=kv_tok, kv_tokens=kv_tokens, kv_sequences=kv_tokens // max(sample_tokens, 1),
        peak=peak, available=hw.memory_gib, fits=peak <= hw.memory_gib, notes=tuple(notes),
        trainer_overhead=overhead,
    )


ESTIMATE_ERROR = 0.025  # megatron estimate vs measured peaks: -2.4% worst (docs/benchmarks.md, "Memory")


def trainer_offload(cfg: RunConfig) -> tuple[bool, str]:
    """(whether the trainer's state leaves the GPU while the engines generate, why). train.offload true/false
    forces it; null (auto, the NVIDIA profiles' default) keeps a colocated trainer resident when its state and the
    engines fit on a GPU together with the estimate's error to spare (the engines then release only their KV
    cache for training: weights, graphs and the trainer never move), else offloads it (pinned host buffers,
    asynchronous copies: rlrun.train.offload). Not colocated, the trainer's GPUs are its own: it stays."""
    t, r = cfg.train, cfg.rollout
    if t.offload is not None:
        return t.offload, f"forced: train.offload={str(t.offload).lower()}"
    if not t.colocate:
        return False, "auto: not colocated, the trainer's GPUs are its own"
    mem = _estimate(cfg, False)
    both = (f"trainer {mem.trainer_total:.1f} GiB + engine {mem.engine_total:.1f} GiB peak at {mem.peak:.1f} GiB "
            f"(+{ESTIMATE_ERROR:.1%} estimate error)")
    if mem.peak * (1 + ESTIMATE_ERROR) <= mem.available:
        return False, f"auto: resident, {both}, within the {mem.available:.1f} GiB of a GPU"
    frac = _resident_fraction(mem) if ENGINES[r.engine].memory == "static_pool" else None
    hint = f"; rollout.mem_fraction_static={frac:g} would keep it resident" if frac is not None else ""
    return True, f"auto: offloaded, resident {both} would exceed the {mem.available:.1f} GiB of a GPU{hint}"


def overflow(cfg: RunConfig) -> tuple[tuple[str, str, float], bool] | None:
    """((message, fix, peak GiB), sure) when the estimate's peak per GPU exceeds a GPU's memory, else None.
    sure: the trainer alone overflows, by its weights, grads and optimizer state (exact arithmetic) or, where the
    backend's activation terms are calibrated, by more than the estimate's error (ESTIMATE_ERROR). An overflow that
    needs the engine's share is not sure: SGLang sizes its KV pool from the memory free when it starts. The gate
    refuses a sure overflow (rlrun.config.capability.memory_fits: validate and run refuse it, plan notes it;
    checks.memory_fit=warn makes it a warning) and warns about the rest: the run would die after the GPUs are
    taken, as a 4B model trained on one 80 GB H100 did (docs/benchmarks.md). A colocated trainer forced resident
    (train.offload=false on a profile whose default is auto) that overflows is refused surely: offloading it is the
    fix.
    The megatron estimate is within 2.4% of measured peaks where it was calibrated (docs/benchmarks.md, "Memory")."""
    if cfg.hardware.vendor == "cpu":  # a CPU profile's memory_gib is a stand-in, not the machine's RAM
        return None
    mem = estimate(cfg)
    if mem.fits:
        return None
    calibrated = BACKENDS[cfg.train.backend].activations_calibrated
    trainer = mem.trainer_total + mem.trainer_overhead
    # a resident trainer forced next to its engines (train.offload=false where the hardware profile leaves it to the
    # plan): offloading it is the fix, so the gate refuses it; a profile that keeps trainers resident (mi300x) is
    # judged as before
    resident = cfg.train.colocate and cfg.train.offload is False and cfg.hardware.defaults.offload_train is not False
    sure = (calibrated and trainer > mem.available * (1 + ESTIMATE_ERROR)) or \
        trainer - mem.trainer_activations > mem.available or resident
    phase = "trainer" if trainer >= mem.engine_total else "engine"
    caveat = "" if sure else (" (with the engine's share: a static-pool engine sizes its KV pool from the memory free at its start)"
                              if trainer <= mem.available else f" ({cfg.train.backend} backend: its activation "
                              "estimate is not calibrated)" if not calibrated else
                              f" (within the estimate's {ESTIMATE_ERROR:.1%} error)")
    return ((f"estimated peak {mem.peak:.1f} GiB per GPU exceeds the {mem.available:.1f} GiB of a {cfg.hardware.name} "
             f"GPU (trainer {mem.trainer_total:.1f} = weights {mem.trainer_weights:.1f} + grads {mem.trainer_grads:.1f}"
             f" + optimizer {mem.trainer_optimizer:.1f} + activations {mem.trainer_activations:.1f}; engine "
             f"{mem.engine_total:.1f}; the {phase} dominates){caveat}: the run {'would' if sure else 'may'} run out of memory",
             ("train.offload=null (auto) or true: a resident trainer (train.offload=false) does not fit beside its "
              "engines; or " if resident else "")
             + "more GPUs or TP/PP/EP, train.offload / rollout.offload when colocated, train.recompute, a smaller "
             "train.max_tokens_per_gpu or rollout.mem_fraction_static" + lean_state_hint(cfg, mem)
             + "; `rlrun plan` shows the breakdown; checks.memory_fit=warn runs it anyway", mem.peak), sure)

# config.json's quantization_config of a block-wise FP8 HF checkpoint (Qwen3-*-FP8, DeepSeek-V3; what SGLang's
# Fp8Config reads: FP8 weights, dynamic activation scales, one scale per 128 x 128 block); rlrun.rollout.fp8 writes it
FP8_QUANT_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                    "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}

