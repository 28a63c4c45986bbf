"""Predicted time and cost of a run, before a GPU is taken (the plan's `cost`; formulas and sources in
docs/config.md, "Predicted time and cost"). Pure arithmetic over the RunConfig, the parameter count, the
memory estimate and the constants of conf/calibration.yaml (per hardware profile: measured, or an estimate
scaled from another profile by peak bf16 TFLOP/s and HBM bandwidth, flagged as such).

Per rollout step, N = matmul parameters (active layers + lm head), L = layers, P = prompt tokens, R = mean
response tokens (response_fraction x max_response_len, or a run's measured mean), S = P + R, BW = HBM bandwidth,
F = peak bf16 FLOP/s. Each phase is a sum of components (in brackets), each scaled by the profile's fit:
  rollout    per engine (engines in parallel, samples split evenly): n requests, concurrency C = min(n,
             max_concurrency / engines, KV sequences at mean length); the longest response Rmax = R x H(n) (the
             expected longest of n exponentially distributed lengths, H the harmonic number) capped at max_len
             (a run that truncated: max_len); decode steps D = n R / C + (Rmax - R) (continuous batching, then
             the drain of the longest); [request] n request_s + [step] D max(L step_layer_s, W / (BW bw_eff))
             (a small-batch decode step is latency-bound: kernel chain and weight read overlap) + [token]
             n R (2N / (g F mfu) + (P + R/2) kv_bytes / (BW bw_eff) + token_s) + n P 2N / (g F mfu)
  log_probs  per forward pass the step needs (old / ref log-probs, critic values): tokens 2(N + L q S) / (world F
             mfu) + micro-batches x L/PP x micro_batch_layer_s / 3
  train      [fixed] train_fixed_s + per optimizer step: [sample] samples per DP rank x sample_s (packing, the
             per-sample loss) + [micro] max(L/PP x micro_batch_layer_s, its tokens (6N or 8N with full recompute
             + 6 L q S) / (world F mfu)) x micro-batches x PP bubble (1 + (PP-1)/micro-batches) + [optimizer]
             2 x state bytes / (BW optimizer_eff)
  weight_sync  [fixed] fixed_s + [layer] L layer_s (per-tensor loads) + [bytes] exported bytes / gb_per_s of the
             transport (async: / update_weights_interval)
  offload    colocated: [engine] offload_s (rollout.offload) + [trainer] 2 x trainer state bytes / host_gb_per_s
  eval, save per event, amortised over eval.interval / checkpoint.save_interval
`scale` per phase: a number (every component) or {component: number}, fitted by `rlrun plan --calibrate`
(rlrun.config.calibrate: measured / predicted of the runs it was fitted to; eval on top of the rollout's).
Async (train.async_train): the producer generates while the trainer trains; both wait for the weight push (the
engines pause for it): step = max(rollout + weight_sync, trainer side), the bubble is the difference. Run: num_rollout steps + start-up + the final save; GPU-hours = run x GPUs."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from math import ceil, log
from pathlib import Path
from typing import Any

from rlrun.config import cache
from rlrun.config.compose import CONF_DIR
from rlrun.config.kinds import BACKENDS, ENGINES, auto_transport, use_critic
from rlrun.config.memory import (GiB, Memory, _attention_widths, engine_fraction, estimate, kv_bytes_per_token,
                                  trainer_offload)
from rlrun.config.params import count_params
from rlrun.config.schema import RunConfig
from rlrun.config.sizes import dp_size

CALIBRATION_FILE = "calibration.yaml"      # the shipped constants, each with its source
FITTED_FILE = "calibration.fitted.yaml"    # `rlrun plan --calibrate` writes here; merged over the shipped file
PHASES = ("rollout", "log_probs", "train", "weight_sync", "offload", "eval", "save")


def calibration_path() -> Path:
    """The fitted overlay: $RLRUN_CALIBRATION, else conf/calibration.fitted.yaml of rlrun's config tree."""
    if os.environ.get("RLRUN_CALIBRATION"):
        return Path(os.environ["RLRUN_CALIBRATION"])

    return CONF_DIR / FITTED_FILE


@lru_cache(maxsize=8)
def _read(path: str, mtime: float) -> dict:
    """The parsed file; kept as JSON in the composition cache's dir keyed by path and mtime, so a cached
    `rlrun plan` does not import PyYAML (~20 ms) for it."""
    import hashlib
    import json


    k = "calibration-" + hashlib.sha256(f"{path}:{mtime}".encode()).hexdigest()[:24]
    if cache.enabled():
        got = cache.get(k)
        if got is not None:
            return got["tree"]
    import yaml

    with open(path) as f:
        tree = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    if cache.enabled():
        cache.put(k, tree, {})
    return tree


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except FileNotFoundError:
        return None


@lru_cache(maxsize=8)
def _table(shipped: str, shipped_mtime: float | None, fitted: str, fitted_mtime: float | None) -> dict:
    return _merge(_read(shipped, shipped_mtime) if shipped_mtime is not None else {},
                  _read(fitted, fitted_mtime) if fitted_mtime is not None else {})


def load_table(fitted: Path | None = None) -> dict:
    """conf/calibration.yaml with the fitted overlay (calibration_path(), or `fitted`) merged over it (one parse
    per file version: a 1,000-point sweep plans every point). Shared: callers copy before changing it."""

    shipped, over = str(CONF_DIR / CALIBRATION_FILE), str(fitted or calibration_path())
    return _table(shipped, _mtime(shipped), over, _mtime(over))


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


@dataclass
class Constants:
    hardware: str
    basis: str                      # measured | estimate
    note: str                       # where the numbers come from
    c: dict                         # the resolved entry
    notes: list[str] = field(default_factory=list)

    def kind(self, group: str, name: str, table: dict) -> dict:
        """The constants of an engine / backend kind; a kind without its own measurement on this profile
        borrows the fallback profile's and the basis becomes an estimate."""
        got = self.c.get(group, {}).get(name)
        if got is not None:
            return got
        fallback = table.get("fallback", "h100")
        measured = table.get(fallback, {}).get(group, {})
        self.basis = "estimate"
        if name in measured:
            self.notes.append(f"no {name} measurement on {self.hardware}: {fallback}'s {group} constants")
            return measured[name]
        # a kind measured nowhere (a plugin's): the first measured kind of its group stands in, said so
        other = next(iter(measured), None)
        self.notes.append(f"no {name} measurement anywhere: {fallback}'s {other} constants stand in")
        return measured.get(other, {})


_OWN = ("basis", "source", "fitted_from", "scaled_from")  # what an entry says of itself, never lent on


def _resolved(table: dict, name: str, seen: tuple[str, ...] = ()) -> dict:
    """A profile's constants: its entry over those of the profile it is scaled_from, along the chain (h200 fitted
    over h100's, an estimate scaled from h200 gets both)."""
    entry = table.get(name, {})
    ref = entry.get("scaled_from")
    if ref is None or ref in seen or ref == name:
        return {k: v for k, v in entry.items() if k not in _OWN}
    return _merge(_resolved(table, ref, (*seen, name)), {k: v for k, v in entry.items() if k not in _OWN})


def constants(cfg: RunConfig, table: dict) -> Constants:
    hw = cfg.hardware.name
    fallback = table.get("fallback", "h100")
    entry = table.get(hw)
    if entry is None:
        base = table.get(fallback, {})
        return Constants(hw, "estimate", f"no calibration for {hw}: {fallback}'s measured constants with {hw}'s peak "
                         f"{cfg.hardware.peak_bf16_tflops:g} TFLOP/s and {fallback}'s bandwidth (both assumed)",
                         dict(base))
    if entry.get("scaled_from"):
        ref = entry["scaled_from"]
        c = _resolved(table, hw)
        if entry.get("basis") == "measured":  # fitted to runs on this hardware (rlrun plan --calibrate)
            return Constants(hw, "measured", entry.get("source", f"fitted on {hw}"), c)
        return Constants(hw, "estimate", f"estimate: no measurement on {hw}; {ref}'s measured efficiencies and fixed "
                         f"costs with {hw}'s peak {cfg.hardware.peak_bf16_tflops:g} TFLOP/s and {c.get('bandwidth_gb_s')} "
                         "GB/s HBM", c)
    return Constants(hw, entry.get("basis", "measured"), entry.get("source", f"measured on {hw}"), dict(entry))


@dataclass(frozen=True)
class Shape:
    """What the formulas need of the model: matmul params, layers, widths, bytes."""
    matmul: int             # active matmul parameters: layers + lm head (the tied embedding counts as the head)
    total: int
    layers: int
    q_width: int            # heads x head dim (the attention FLOP term)
    kv_bytes: int           # per token per engine GPU


def shape(cfg: RunConfig) -> Shape:
    pc, m = count_params(cfg.model), cfg.model
    matmul = pc.active - pc.embedding + (m.vocab_size * m.hidden_size if pc.lm_head == 0 else 0)
    return Shape(matmul, pc.total, m.num_layers, _attention_widths(m)[0], kv_bytes_per_token(cfg))


def longest_response(mean: float, max_len: int, n: int, truncated: float | None = None) -> float:
    """The expected longest of n responses of mean length `mean` (the decode steps an engine runs before its last
    request ends): exponentially distributed lengths (mean x the n-th harmonic number), capped at max_len; a run's
    measured truncated fraction says whether one of its n reached the limit (n x fraction >= 1/2)."""
    if truncated is not None and n * truncated >= 0.5:
        return float(max_len)
    harmonic = sum(1.0 / i for i in range(1, max(n, 1) + 1)) if n < 1000 else \
        log(n) + 0.5772156649015329 + 1 / (2 * n) - 1 / (12 * n * n)  # Euler-Maclaurin, error < 1e-14 here
    return min(float(max_len), mean * harmonic)


def generation(cfg: RunConfig, k: Constants, eng: dict, sh: Shape, mem: Memory, samples: int, max_len: int,
               prompt: float, frac: float, want: int | None = None, truncated: float | None = None) -> dict:
    """One rollout's (or eval's) generation per engine: the seconds, per component (parts: request, step, token)
    and what they come from."""
    r = cfg.rollout
    engines = max(r.num_engines, 1)
    g = r.gpus_per_engine
    bw = k.c["bandwidth_gb_s"] * 1e9 * eng["bandwidth_eff"]
    flops = cfg.hardware.peak_bf16_tflops * 1e12 * eng["mfu"] * g
    n = ceil(samples / engines)
    resp = min(frac * max_len, max_len)
    want = want or max(min(n, ceil(r.max_concurrency / engines)), 1)
    static = ENGINES[r.engine].memory == "static_pool"
    kv_seq = int(mem.kv_tokens // max(prompt + resp, 1)) if static else want
    conc = max(min(want, kv_seq), 1)
    longest = longest_response(resp, max_len, n, truncated)
    steps = n * resp / conc + max(longest - resp, 0.0)
    weights = 2 * sh.total / g
    # a decode step at small batch is latency-bound: the chain of per-layer kernels and the weight read overlap,
    # the slower sets the floor (SGLang's decode log on one H200: ~1.9 ms a step for the 0.6B and the 1.7B shapes)
    per_step = max(sh.layers * eng["step_layer_s"], weights / bw)
    per_token = 2 * sh.matmul / flops + (prompt + resp / 2) * sh.kv_bytes / bw + eng.get("token_s", 0.0)
    parts = {"request": n * eng["request_s"], "step": steps * per_step,
             "token": n * resp * per_token + n * prompt * 2 * sh.matmul / flops}
    return {"seconds": sum(parts.values()), "parts": parts, "requests_per_engine": n, "concurrency_wanted": want,
            "concurrency": conc, "kv_tokens": mem.kv_tokens if static else None,
            "kv_sequences": kv_seq if static else None, "decode_steps": round(steps, 1),
            "longest_response_tokens": round(longest, 1), "response_tokens": round(resp, 1), "prompt_tokens": prompt,
            "full_length_tokens": want * (prompt + max_len)}


def _micro_batches(cfg: RunConfig, samples: float, tokens: float, budget: int | None) -> int:
    t = cfg.train
    if t.use_dynamic_batch_size and budget:
        return max(ceil(samples * tokens / (budget * cfg.parallelism.cp)), 1)
    return max(ceil(samples / t.micro_batch_size), 1)


def trainer_phases(cfg: RunConfig, k: Constants, be: dict, sh: Shape, mem: Memory, seq: float) -> dict[str, float]:
    """log_probs and train seconds of one rollout step on the trainer, per component."""
    t, p, a = cfg.train, cfg.parallelism, cfg.algo
    world, dp = t.num_gpus, dp_size(cfg)
    flops = cfg.hardware.peak_bf16_tflops * 1e12 * be["mfu"] * world
    samples = cfg.rollout.rollout_batch_size * cfg.rollout.n_samples_per_prompt
    tokens = samples * seq
    stage_layers = ceil(sh.layers / p.pp)
    critic = 2 if use_critic(cfg) else 1
    passes = 0
    if not a.use_rollout_logprobs and (t.num_steps_per_rollout > 1 or a.kl_coef != 0):
        passes += 1
    if a.use_kl_loss or a.kl_coef != 0:
        passes += 1
    passes += critic - 1  # the critic's values
    lp_micro = _micro_batches(cfg, samples / dp, seq, t.log_probs_max_tokens_per_gpu or t.max_tokens_per_gpu)
    fwd = tokens * 2 * (sh.matmul + sh.layers * sh.q_width * seq) / flops
    log_probs = passes * (fwd + lp_micro * stage_layers * be["micro_batch_layer_s"] / 3)
    steps = t.num_steps_per_rollout
    micro = _micro_batches(cfg, t.global_batch_size / dp, seq, t.max_tokens_per_gpu)
    bubble = 1 + (p.pp - 1) / micro
    matmul = 8 if t.recompute.granularity == "full" else 6
    step_flops = t.global_batch_size * seq * (matmul * sh.matmul + 6 * sh.layers * sh.q_width * seq)
    state = (mem.trainer_weights + mem.trainer_grads + mem.trainer_optimizer) * GiB
    optimizer = 2 * state / (k.c["bandwidth_gb_s"] * 1e9 * be["optimizer_eff"])
    # per micro-batch the host's per-layer Python and the GPU's work overlap: the slower sets the pace
    per_micro = max(stage_layers * be["micro_batch_layer_s"], step_flops / micro / flops)
    return {"log_probs": {"forward": log_probs},
            "train": {"fixed": be["train_fixed_s"],
                      "sample": steps * t.global_batch_size / dp * be.get("sample_s", 0.0) * critic,
                      "micro": steps * micro * per_micro * bubble * critic,
                      "optimizer": steps * optimizer},
            "micro_batches": micro, "log_prob_passes": passes}


def component_scale(scale: Any, part: str) -> float:
    """A phase's fitted scale for one of its components: a number (the whole phase) or {component: number}, '*'
    standing for the components not named."""
    if isinstance(scale, dict):
        return float(scale.get(part, scale.get("*", 1.0)))
    return float(scale if scale is not None else 1.0)


def _scaled(parts: dict[str, float], scale: Any) -> float:
    return sum(s * component_scale(scale, part) for part, s in parts.items())


def predict(cfg: RunConfig, transport: str, table: dict | None = None, mem: Memory | None = None,
            workload: dict | None = None) -> dict[str, Any]:
    """The cost of one config whose weights go over `transport` (the plan's weight_sync): per-phase seconds of a
    rollout step, the step, the run, GPU-hours, the KV check, the assumptions and the basis of every constant.
    `workload`: what a run measured of its own samples (measured_phases' response_len and truncated_frac), used
    instead of the assumed response length (calibration and the predicted-vs-measured tables)."""
    table = load_table() if table is None else table
    if not table:
        return {"basis": "none", "note": "no calibration table (conf/calibration.yaml)"}
    k = constants(cfg, table)
    r, t, e = cfg.rollout, cfg.train, cfg.eval
    mem = mem or estimate(cfg)
    sh = shape(cfg)
    assume = k.c.get("assume", {})
    workload = workload or {}
    frac = float(assume.get("response_fraction", 1.0))
    truncated = None
    if workload.get("response_len") is not None:
        frac = min(float(workload["response_len"]) / max(r.max_response_len, 1), 1.0)
        truncated = workload.get("truncated_frac")
    prompt = float(cfg.data.max_prompt_len if cfg.data.max_prompt_len is not None else
                   min(assume.get("prompt_tokens", 256), max(r.context_length - r.max_response_len, 0)))
    assumptions = [f"prompts {prompt:g} tokens" + (" (data.max_prompt_len, an upper bound)" if cfg.data.max_prompt_len
                                                  is not None else " (assumed: data.max_prompt_len is null)"),
                   (f"responses {frac * r.max_response_len:.1f} tokens (measured mean)" if truncated is not None or
                    workload.get("response_len") is not None else
                    f"responses {frac:g} x rollout.max_response_len (mean; exponentially distributed: the longest of "
                    "an engine's requests sets its decode steps)")]
    eng = k.kind("engines", r.engine, table)
    be = k.kind("backends", t.backend, table)
    raw_scale = k.c.get("scale", {}) or {}
    scale = {ph: raw_scale.get(ph, 1.0) for ph in PHASES}
    samples = r.rollout_batch_size * r.n_samples_per_prompt
    gen = generation(cfg, k, eng, sh, mem, samples, r.max_response_len, prompt, frac, truncated=truncated)
    parts: dict[str, dict[str, float]] = {"rollout": gen["parts"]}
    parts.update({ph: s for ph, s in trainer_phases(cfg, k, be, sh, mem, prompt + frac * r.max_response_len).items()
                  if ph in PHASES})
    ws = k.c.get("weight_sync", {}).get(transport, {"gb_per_s": 1.0, "fixed_s": 0.0})
    sync_bytes = sh.total * (2 if BACKENDS[t.backend].memory == "sharded" else 4)
    interval = r.update_weights_interval if t.async_train else 1
    parts["weight_sync"] = {"fixed": ws["fixed_s"] / interval, "layer": sh.layers * ws.get("layer_s", 0.0) / interval,
                            "bytes": sync_bytes / (ws["gb_per_s"] * 1e9) / interval}
    state = (mem.trainer_weights + mem.trainer_grads + mem.trainer_optimizer) * GiB
    parts["offload"] = {"engine": eng.get("offload_s", 0.0) if t.colocate and r.offload else 0.0,
                        "trainer": 2 * state / (k.c.get("offload", {}).get("host_gb_per_s", 10.0) * 1e9)
                        if t.colocate and trainer_offload(cfg)[0] else 0.0}
    event_parts: dict[str, dict[str, float]] = {}
    if e.interval:
        prompts = int(assume.get("eval_prompts", 30)) * max(len(e.datasets), 1)
        ev = generation(cfg, k, eng, sh, mem, prompts * e.n_samples_per_prompt, e.max_response_len, prompt,
                        float(assume.get("response_fraction", 1.0)))
        # eval is generation: the rollout's component scales, times eval's own (a number) when one was fitted
        event_parts["eval"] = {p: s * component_scale(scale["rollout"], p) for p, s in ev["parts"].items()}
        assumptions.append(f"eval: {prompts} prompts x {e.n_samples_per_prompt} samples (assumed prompt count)")
    spec = BACKENDS[t.backend]
    ckpt_per_param = spec.checkpoint_bytes.get(cfg.optim.state_dtype) or max(spec.checkpoint_bytes.values(), default=14)
    sv = k.c.get("save", {"gb_per_s": 1.0, "fixed_s": 0.0})
    save_parts = {"fixed": sv["fixed_s"], "bytes": sh.total * ckpt_per_param / (sv["gb_per_s"] * 1e9)}
    save_event = _scaled(save_parts, scale["save"])
    if cfg.checkpoint.save_interval:
        event_parts["save"] = save_parts
    phases = {ph: _scaled(p, scale[ph]) for ph, p in parts.items()}
    events = {ph: _scaled(p, scale[ph]) for ph, p in event_parts.items()}
    phases["eval"] = events.get("eval", 0.0) / (e.interval or 1)
    phases["save"] = events.get("save", 0.0) / (cfg.checkpoint.save_interval or 1)
    overhead = float(k.c.get("step_overhead_s", 0.0))
    trainer_side = phases["log_probs"] + phases["train"] + phases["weight_sync"] + phases["eval"] + phases["save"]
    out: dict[str, Any] = {}
    if t.async_train:  # the engines pause for the push: the weight sync is on both sides, overlapped by neither
        producer = phases["rollout"] + phases["weight_sync"]
        step = max(producer, trainer_side) + overhead
        out["async"] = {"producer_s": producer, "trainer_s": trainer_side, "bubble_s": abs(producer - trainer_side),
                        "waits": "trainer" if producer > trainer_side else "engines",
                        "hidden_s": min(producer, trainer_side)}
    else:
        step = sum(phases.values()) + overhead
    core = step - phases["eval"] - phases["save"] if not t.async_train else \
        max(producer, trainer_side - phases["eval"] - phases["save"]) + overhead
    gpus = t.num_gpus if t.colocate else t.num_gpus + r.num_gpus
    final_save = save_event if not cfg.checkpoint.save_interval or r.num_rollout % cfg.checkpoint.save_interval else 0.0
    run_s = r.num_rollout * step + float(k.c.get("startup_s", 0.0)) + final_save
    warnings = kv_warnings(cfg, gen)
    if gen["concurrency"] == gen["concurrency_wanted"] < gen["requests_per_engine"] and \
            (gen["kv_sequences"] or 0) > gen["concurrency"]:  # the client's bound, not the KV cache, limits the batch
        wide = min(gen["requests_per_engine"], gen["kv_sequences"])
        alt = _scaled(generation(cfg, k, eng, sh, mem, samples, r.max_response_len, prompt, frac, want=wide,
                                 truncated=truncated)["parts"], scale["rollout"])
        warnings.append(f"rollout.max_concurrency {r.max_concurrency} caps each of the {max(r.num_engines, 1)} engine(s) "
                        f"at {gen['concurrency']} requests while its KV cache holds {gen['kv_sequences']} sequences: "
                        f"rollout.max_concurrency={wide * max(r.num_engines, 1)} would cut generation from "
                        f"{phases['rollout']:.1f} s to {alt:.1f} s (predicted)")
    out.update({
        "hardware": k.hardware, "basis": k.basis, "note": "; ".join([k.note, *k.notes]),
        "phases_s": dict(phases), "overhead_s": overhead,
        "events_s": dict(events), "step_s": step,
        "step_core_s": core,
        "run_h": run_s / 3600, "gpus": gpus, "gpu_hours": run_s * gpus / 3600,
        "generation": {k_: v for k_, v in gen.items() if k_ not in ("seconds", "parts")},
        "weight_sync_gb": round(sync_bytes / 1e9, 3), "final_save_s": final_save,
        "parts_s": {ph: {p: s * component_scale(scale.get(ph), p) for p, s in ps.items()}
                    for ph, ps in {**parts, **event_parts}.items()},
        "assumptions": assumptions, "warnings": warnings,
        "scale": {ph: s for ph, s in scale.items() if s != 1.0},
        "unscaled_parts_s": {ph: dict(ps) for ph, ps in {**parts, **event_parts, "save": save_parts}.items()},
    })
    return out


def kv_warnings(cfg: RunConfig, gen: dict) -> list[str]:
    """SGLang's static KV pool against the concurrency the batch asks for."""
    if gen["kv_tokens"] is None:
        return []
    r = cfg.rollout
    kv, want = gen["kv_tokens"], gen["concurrency_wanted"]
    fix = ("a larger rollout.mem_fraction_static, more engines (rollout.num_gpus) or a lower rollout.max_concurrency")
    if gen["concurrency"] < want:
        return [f"KV cache: each engine holds {kv:,} tokens at mem_fraction_static {engine_fraction(cfg)[0]:g} = "
                f"{gen['kv_sequences']} sequences of mean length, the batch asks for {want} at once: requests will "
                f"queue (generation runs {want / max(gen['concurrency'], 1):.1f}x longer than with room); {fix}"]
    if gen["full_length_tokens"] > kv:
        return [f"KV cache: {want} concurrent sequences at full length (prompt + rollout.max_response_len) need "
                f"{gen['full_length_tokens']:,.0f} tokens, an engine holds {kv:,}: the engine will retract (re-queue) "
                f"requests when long responses fill it; {fix}"]
    return []


def advise(cfg: RunConfig, transport: str, table: dict | None = None) -> list[dict]:
    """For the GPUs this config uses: the colocated and every disaggregated split (trainer GPUs a multiple of
    TP x PP x CP whose DP divides the global batch, rollout GPUs a multiple of gpus_per_engine), synchronous and
    asynchronous with max_staleness 1, ranked by predicted step time; configs whose memory does not fit are left
    out. Each row: layout, step_s, gain (current step / this step)."""
    table = load_table() if table is None else table
    if not table:
        return []
    t, r, p = cfg.train, cfg.rollout, cfg.parallelism
    gpus = t.num_gpus if t.colocate else t.num_gpus + r.num_gpus
    gpn = cfg.hardware.gpus_per_node
    unit, g = p.tp * p.pp * p.cp, r.gpus_per_engine
    base = predict(cfg, transport, table)["step_s"]
    rows = []

    def layout(train_gpus: int) -> tuple[int, int] | None:
        if train_gpus <= gpn:
            return 1, train_gpus
        return (train_gpus // gpn, gpn) if train_gpus % gpn == 0 else None

    def add(name: str, train_gpus: int, colocate: bool, rollout_gpus: int, async_train: bool) -> None:
        nodes = layout(train_gpus)
        if nodes is None or train_gpus % unit or t.global_batch_size % (train_gpus // unit):
            return
        same = colocate == t.colocate  # a changed placement takes the hardware's offload defaults (none apart)
        d = cfg.hardware.defaults
        tr = t.model_copy(update={"num_nodes": nodes[0], "gpus_per_node": nodes[1], "colocate": colocate,
                                  "async_train": async_train,
                                  "offload": colocate and (t.offload if same else d.offload_train)})
        ro = r.model_copy(update={"num_gpus": rollout_gpus, "offload": colocate and (r.offload if same else d.offload_rollout),
                                  "max_staleness": 1 if async_train else r.max_staleness})
        var = cfg.model_copy(update={"train": tr, "rollout": ro})
        mem = estimate(var)
        if not mem.fits:
            return
        step = predict(var, transport if colocate else auto_transport(var), table, mem)["step_s"]
        rows.append({"layout": name, "step_s": round(step, 3), "gain": round(base / step, 2) if step else None,
                     "current": (colocate == t.colocate and async_train == t.async_train and train_gpus == t.num_gpus)})

    if gpus % g == 0:
        add(f"colocated, {gpus} GPU{'s' if gpus > 1 else ''}", gpus, True, gpus, False)
    for train_gpus in range(unit, gpus, unit):
        rollout = gpus - train_gpus
        if rollout % g:
            continue
        for async_train in (False, True):
            add(f"{train_gpus} trainer + {rollout} rollout, " + ("async (max_staleness 1)" if async_train else "sync"),
                train_gpus, False, rollout, async_train)
    return sorted(rows, key=lambda x: x["step_s"])


def measured_phases(rows: list[dict]) -> dict[str, float]:
    """Median seconds per phase of a run's metrics.jsonl rows, the first row left out (warm-up: first calls,
    compiles) when there are more: rollout (the async producer's time when there is one), log_probs, train,
    weight_sync, offload per step; eval and save per step that has them; step_core = step minus eval and save.
    The median, not the mean: one step stalled by another job on the machine must not move the fit."""
    from statistics import median

    rows = rows[1:] if len(rows) > 1 else rows
    out: dict[str, float] = {}
    for ph in PHASES:
        key = "time/produce_s" if ph == "rollout" and any("time/produce_s" in r for r in rows) else f"time/{ph}_s"
        vals = [r[key] for r in rows if key in r]
        if vals:
            out[ph] = median(vals)
    cores = [r["time/step_s"] - r.get("time/eval_s", 0.0) - r.get("time/save_s", 0.0) for r in rows if "time/step_s" in r]
    if cores:
        out["step_core"] = median(cores)
    lens = [r["rollout/response_len_mean"] for r in rows if "rollout/response_len_mean" in r]
    if lens:
        out["response_len"] = median(lens)
    trunc = [r["rollout/truncated_frac"] for r in rows if "rollout/truncated_frac" in r]
    if trunc:
        out["truncated_frac"] = median(trunc)
    return out


def workload(meas: dict) -> dict:
    """The part of measured_phases that describes the run's samples (predict's `workload`)."""
    return {k: meas[k] for k in ("response_len", "truncated_frac") if k in meas}


def predicted_phases(cost: dict) -> dict[str, float]:
    """The plan's prediction in measured_phases' terms (eval and save per event; without checkpoint.save_interval
    the final save)."""
    out = {ph: s for ph, s in cost.get("phases_s", {}).items() if ph not in ("eval", "save")}
    out.update(cost.get("events_s", {}))
    if "save" not in out and cost.get("final_save_s"):  # no save_interval: the run saves once, at its end
        out["save"] = cost["final_save_s"]
    if "step_core_s" in cost:
        out["step_core"] = cost["step_core_s"]
    return out
