"""Cross-field rules (docs/config.md "Validation"): every rule slime applies (slime/utils/arguments.py,
slime_validate_args), and the gaps it leaves. A rule is a small function RunConfig -> Problems; check() runs
them all so that every problem is reported at once.
Layout rules (parallelism, placement, hardware) live in layout_rules.py, the HF config.json check in
hfcheck.py; this module holds batch, algorithm, sampling, data and training-schedule rules."""
from __future__ import annotations

from typing import Iterator

from rlrun.config.derive import batch_fix
from rlrun.config.families import FAMILIES
from rlrun.config.errors import Problem, did_you_mean
from rlrun.config.kinds import (BACKENDS, ENGINES, ESTIMATORS, LOSS_TYPES, REWARDS, TRANSPORTS, discover, resolve,
                                use_critic)
from rlrun.config.plan import weight_sync as transport_of
from rlrun.config.registry import RULES
from rlrun.config.schema import RunConfig
from rlrun.config.sizes import dp_size as dp_ranks, known_sample_tokens, sample_tokens

rule = RULES  # the decorator; rules of other modules register through rlrun.config.registry.RULES too


def check(cfg: RunConfig) -> list[Problem]:
    discover()  # every plugin's rules
    return RULES.run(cfg)


# ---- batch identity and schedule -------------------------------------------------------------------------

@rule
def batch_identity(cfg: RunConfig) -> Iterator[Problem]:
    r, t = cfg.rollout, cfg.train
    samples = r.rollout_batch_size * r.n_samples_per_prompt
    if samples != t.global_batch_size * t.num_steps_per_rollout:
        yield Problem("train.global_batch_size",
                      f"batch identity broken: rollout_batch_size * n_samples_per_prompt = {r.rollout_batch_size} * "
                      f"{r.n_samples_per_prompt} = {samples}, but global_batch_size * num_steps_per_rollout = "
                      f"{t.global_batch_size} * {t.num_steps_per_rollout} = {t.global_batch_size * t.num_steps_per_rollout}",
                      batch_fix(r.rollout_batch_size, r.n_samples_per_prompt, t.global_batch_size)
                      if samples % t.global_batch_size else
                      f"set train.num_steps_per_rollout={samples // t.global_batch_size} (or null: derived)",
                      {"samples_per_rollout": samples, "global_batch_size": t.global_batch_size,
                       "num_steps_per_rollout": t.num_steps_per_rollout})


@rule
def schedule(cfg: RunConfig) -> Iterator[Problem]:
    total = cfg.rollout.num_rollout * cfg.train.num_steps_per_rollout
    if cfg.optim.lr_warmup_fraction is not None and cfg.optim.lr_warmup_iters > 0:
        # Megatron-LM validate_args: "Can only specify one of lr-warmup-fraction and lr-warmup-iters"
        yield Problem("optim.lr_warmup_fraction", f"both lr_warmup_fraction ({cfg.optim.lr_warmup_fraction}) and "
                      f"lr_warmup_iters ({cfg.optim.lr_warmup_iters}) are set", "set one of them (the other 0 / null)",
                      cfg.optim.lr_warmup_fraction)
    if cfg.optim.lr_warmup_iters >= total and cfg.optim.lr_warmup_iters > 0:
        yield Problem("optim.lr_warmup_iters", f"warmup of {cfg.optim.lr_warmup_iters} steps never ends: the run "
                      f"has {total} optimizer steps ({cfg.rollout.num_rollout} rollouts x "
                      f"{cfg.train.num_steps_per_rollout})", f"set optim.lr_warmup_iters below {total}",
                      cfg.optim.lr_warmup_iters)
    if cfg.optim.min_lr > cfg.optim.lr:
        yield Problem("optim.min_lr", f"min_lr {cfg.optim.min_lr} is above lr {cfg.optim.lr}",
                      f"set optim.min_lr <= {cfg.optim.lr}", cfg.optim.min_lr)


@rule
def micro_batches(cfg: RunConfig) -> Iterator[Problem]:
    t, p = cfg.train, cfg.parallelism
    if t.num_gpus % (p.tp * p.pp * p.cp):
        return  # reported by the world-size rule
    dp_size = dp_ranks(cfg)
    if t.global_batch_size % dp_size:
        yield Problem("train.global_batch_size", f"global_batch_size {t.global_batch_size} does not split over "
                      f"DP {dp_size} ranks (world {t.num_gpus} / (TP {p.tp} * PP {p.pp} * CP {p.cp}))",
                      f"use a global_batch_size that is a multiple of {dp_size}", t.global_batch_size)
    elif not t.use_dynamic_batch_size and (t.global_batch_size // dp_size) % t.micro_batch_size:
        per = t.global_batch_size // dp_size
        yield Problem("train.micro_batch_size", f"{per} samples per DP rank per step are not a multiple of "
                      f"micro_batch_size {t.micro_batch_size}", f"use a micro_batch_size that divides {per}",
                      t.micro_batch_size)


@rule
def dynamic_batching(cfg: RunConfig) -> Iterator[Problem]:
    t = cfg.train
    if not t.use_dynamic_batch_size:
        return
    if t.max_tokens_per_gpu is None:
        yield Problem("train.max_tokens_per_gpu", "dynamic batching (train.use_dynamic_batch_size=true) needs a "
                      "token budget per GPU", "set train.max_tokens_per_gpu (e.g. max prompt + response length)")
        return
    need, cp = cfg.rollout.max_response_len, cfg.parallelism.cp
    # A sample above the budget trains alone in its micro-batch (rlrun.train.batching.group_samples), as slime's
    # dp_schedule does; a budget below the response limit itself is refused (most long samples would overflow it),
    # one between the response and a whole sample is a warning (rlrun.config.warn.samples_above_the_budget).
    # A log-prob budget equal to the training one is usually derived from it: one problem, at the source.
    for key, budget in (("max_tokens_per_gpu", t.max_tokens_per_gpu),
                        ("log_probs_max_tokens_per_gpu", t.log_probs_max_tokens_per_gpu
                         if t.log_probs_max_tokens_per_gpu != t.max_tokens_per_gpu else None)):
        if budget is not None and budget * cp < need:
            yield Problem(f"train.{key}", f"{budget} tokens{f' x CP {cp}' if cp > 1 else ''} cannot hold one "
                          f"response of up to {need} tokens ({_sample_desc(cfg)})",
                          f"set train.{key} >= {-(-known_sample_tokens(cfg) // cp)} or shorten the response limit",
                          budget)


def _sample_desc(cfg: RunConfig) -> str:
    if cfg.data.max_prompt_len is None:
        return f"response {cfg.rollout.max_response_len} + at least 1 prompt token"
    return f"prompt {cfg.data.max_prompt_len} + response {cfg.rollout.max_response_len}"


# ---- algorithm -------------------------------------------------------------------------------------------

@rule
def kl(cfg: RunConfig) -> Iterator[Problem]:
    a = cfg.algo
    # slime_validate_args: `assert not (args.kl_coef != 0 and args.kl_loss_coef != 0)`, whether or not the KL loss
    # is on (without it the loss coefficient would be ignored)
    if a.kl_loss_coef != 0 and a.kl_coef != 0:
        twice = "KL is applied twice: in the reward" if a.use_kl_loss else \
            "two KL coefficients (the KL loss is off, so kl_loss_coef would be ignored): one in the reward"
        yield Problem("algo.kl_coef", f"{twice} (kl_coef {a.kl_coef}) and as a loss (kl_loss_coef {a.kl_loss_coef}); "
                      "slime asserts only one is set", "set algo.kl_coef=0 or algo.kl_loss_coef=0", a.kl_coef)
    # KL needs a reference model. With neither hf nor ref the reference is the (seeded) random init on both
    # backends (megatron maps in the torch backend's init: megatron_backend._hf_getter), which is
    # the initial policy only when training starts from it too; a policy loaded from checkpoint.load would be
    # pulled towards random weights.
    needs_ref = a.use_kl_loss or a.kl_coef != 0
    ck = cfg.checkpoint
    if needs_ref and ck.ref is None and ck.load is not None:
        yield Problem("checkpoint.ref", f"KL (algo.use_kl_loss or algo.kl_coef) needs a reference model; the policy "
                      f"comes from checkpoint.load {ck.load} but checkpoint.ref and checkpoint.hf are null",
                      "set checkpoint.ref (or checkpoint.hf) to the model the run started from, or "
                      "algo.use_kl_loss=false and algo.kl_coef=0", None)


@rule
def estimator(cfg: RunConfig) -> Iterator[Problem]:
    a, n = cfg.algo, cfg.rollout.n_samples_per_prompt
    kind = ESTIMATORS[a.advantage_estimator]
    if kind.needs_whitening and not a.normalize_advantages:
        yield Problem("algo.normalize_advantages", f"{a.advantage_estimator} needs advantage whitening",
                      "set algo.normalize_advantages=true", a.normalize_advantages)
    if kind.group_normalised and n == 1 and LOSS_TYPES[a.loss_type].needs_advantages:
        yield Problem("rollout.n_samples_per_prompt", f"{a.advantage_estimator} compares samples within a group; "
                      "with one sample per prompt every advantage is 0 and nothing is learned",
                      "set rollout.n_samples_per_prompt >= 2 (8 is usual), or algo=reinforce_plus_plus / ppo", n)
    if a.dual_clip_c is not None and a.dual_clip_c <= 1:
        yield Problem("algo.dual_clip_c", f"dual-clip c must be > 1, got {a.dual_clip_c}",
                      "set algo.dual_clip_c=3.0 (a common value) or null to turn dual clip off", a.dual_clip_c)
    if a.eps_clip_high < a.eps_clip:
        yield Problem("algo.eps_clip_high", f"eps_clip_high {a.eps_clip_high} is below eps_clip {a.eps_clip}: the "
                      f"ratio's upper bound 1 + {a.eps_clip_high} would clip harder than its lower bound 1 - "
                      f"{a.eps_clip} (clip-higher, as in DAPO, raises it: 0.28 with eps_clip 0.2)",
                      f"set algo.eps_clip_high >= {a.eps_clip} (or null: = eps_clip)", a.eps_clip_high)
    if a.eps_clip > 1:
        yield Problem("algo.eps_clip", f"eps_clip {a.eps_clip} makes the lower ratio bound 1 - eps_clip negative",
                      "set algo.eps_clip <= 1 (0.2 is usual)", a.eps_clip)
    if a.use_tis and a.use_rollout_logprobs:
        yield Problem("algo.use_tis", "truncated importance sampling corrects rollout log-probs towards the "
                      "trainer's; with use_rollout_logprobs the two are the same and TIS is meaningless",
                      "set algo.use_tis=false or algo.use_rollout_logprobs=false")
    if a.use_tis and a.tis_clip_low >= a.tis_clip:
        yield Problem("algo.tis_clip_low", f"tis_clip_low {a.tis_clip_low} >= tis_clip {a.tis_clip}",
                      "set algo.tis_clip_low below algo.tis_clip (0 and 2 are usual)", a.tis_clip_low)


@rule
def critic(cfg: RunConfig) -> Iterator[Problem]:
    a, t = cfg.algo, cfg.train
    if use_critic(cfg) and not BACKENDS[t.backend].critic:
        builds = [b for b, spec in BACKENDS.items() if spec.critic]
        free = [e for e, spec in ESTIMATORS.items() if not spec.needs_critic]
        yield Problem("train.backend", f"algo {a.name} (advantage_estimator {a.advantage_estimator}) trains a "
                      f"critic, which only the {' and '.join(builds)} backend builds; train.backend is {t.backend}",
                      f"set train.backend={' or '.join(builds)} (data parallel: parallelism=tp1), or a critic-free algo "
                      f"(algo={', '.join(free[:4])})", t.backend)


@rule
def offpolicy(cfg: RunConfig) -> Iterator[Problem]:
    """Rollout correction (use_tis, tis_level, tis_mode) and OPSM: rlrun.algo.offpolicy."""
    a = cfg.algo
    if not a.use_tis:
        for key, value, plain in (("tis_level", a.tis_level, "token"), ("tis_mode", a.tis_mode, "truncate")):
            if value != plain:
                yield Problem(f"algo.{key}", f"{key}={value} chooses how the rollout correction weights the loss, "
                              "and the correction is off (algo.use_tis=false): it would be ignored",
                              f"set algo.use_tis=true, or drop algo.{key}", value)
    elif a.tis_clip_low < a.tis_clip and not a.tis_clip_low <= 1.0 <= a.tis_clip:  # order: rule `estimator`
        yield Problem("algo.tis_clip", f"the band [tis_clip_low {a.tis_clip_low}, tis_clip {a.tis_clip}] excludes 1: a "
                      f"token the engines and the trainer agree on (ratio 1) would get weight "
                      f"{'0' if a.tis_mode != 'truncate' else min(max(1.0, a.tis_clip_low), a.tis_clip)}",
                      "set algo.tis_clip_low <= 1 <= algo.tis_clip (0.5 and 2 are usual for icepop)", a.tis_clip)
    yield from _mis(a)
    if a.opsm_reference != "rollout" and not a.use_opsm:
        yield Problem("algo.opsm_reference", f"opsm_reference={a.opsm_reference} chooses OPSM's reference policy, "
                      "and OPSM is off (algo.use_opsm=false): it would be ignored",
                      "set algo.use_opsm=true, or drop algo.opsm_reference", a.opsm_reference)
    if a.use_unbiased_kl and not a.use_kl_loss:
        yield Problem("algo.use_unbiased_kl", "weights the KL loss, and there is none (algo.use_kl_loss=false): it "
                      "would be ignored", "set algo.use_kl_loss=true, or algo.use_unbiased_kl=false", True)


def _mis(a) -> Iterator[Problem]:
    """slime MIS's options (rlrun.algo.offpolicy.Rejection, tis_batch_normalize, tis_reject_scope): each
    needs the stage it belongs to."""
    off = ("algo.use_tis=false" if not a.use_tis else "algo.use_rs=false")
    ignored = [("tis_reject_scope", a.tis_reject_scope, "pg"), ("use_rs", a.use_rs, False),
               ("tis_batch_normalize", a.tis_batch_normalize, False)] if not a.use_tis else []
    if not (a.use_tis and a.use_rs):
        ignored += [("rs_level", a.rs_level, "token"), ("rs_veto_threshold", a.rs_veto_threshold, None),
                    ("rs_clip", a.rs_clip, a.tis_clip), ("rs_clip_low", a.rs_clip_low, a.tis_clip_low)]
    for key, value, plain in ignored:
        if value != plain:
            yield Problem(f"algo.{key}", f"{key}={value} belongs to the rollout correction's "
                          f"{'rejection stage' if key.startswith('rs_') else 'weights'}, which is off ({off}): it "
                          "would be ignored", f"drop algo.{key} (or turn the stage on)", value)
    if a.use_tis and a.use_rs and not a.rs_clip_low <= 1.0 <= a.rs_clip:
        yield Problem("algo.rs_clip", f"the rejection band [rs_clip_low {a.rs_clip_low}, rs_clip {a.rs_clip}] "
                      "excludes 1: a token the engines and the trainer agree on would be rejected",
                      "set algo.rs_clip_low <= 1 <= algo.rs_clip", a.rs_clip)
    if a.use_tis and a.tis_reject_scope == "all" and a.tis_mode == "truncate" and not a.use_rs:
        yield Problem("algo.tis_reject_scope", "tis_reject_scope=all says where a rejected token goes, and nothing "
                      "rejects (tis_mode=truncate, use_rs=false): it would be ignored",
                      "drop algo.tis_reject_scope, or set algo.tis_mode=mask / algo.use_rs=true", "all")


# ---- rollout and sampling --------------------------------------------------------------------------------

@rule
def sampling(cfg: RunConfig) -> Iterator[Problem]:
    r, ev = cfg.rollout, cfg.eval
    # eval values equal to rollout's are usually derived from them: report the problem once, at the source.
    for sec, t, top_p in (("rollout", r.temperature, r.top_p),
                          ("eval", ev.temperature if ev.temperature != r.temperature else 1.0,
                           ev.top_p if ev.top_p != r.top_p else 1.0)):
        if t <= 0:
            yield Problem(f"{sec}.temperature", f"temperature must be > 0 for sampling, got {t}",
                          f"set {sec}.temperature in (0, 2], e.g. 1.0 (greedy decoding is not RL sampling)", t)
        if not 0 < top_p <= 1:
            yield Problem(f"{sec}.top_p", f"top_p must be in (0, 1], got {top_p}", f"set {sec}.top_p=1.0", top_p)
    k = cfg.rollout.top_k
    if k == 0 or k < -1:
        yield Problem("rollout.top_k", f"top_k must be -1 (off) or >= 1, got {k}", "set rollout.top_k=-1", k)
    m = cfg.rollout.mem_fraction_static
    if m is not None and not 0 < m < 1:
        yield Problem("rollout.mem_fraction_static", f"must be in (0, 1), got {m}",
                      "set rollout.mem_fraction_static to 0.7 (colocated) or 0.8-0.9 (dedicated GPUs)", m)


@rule
def over_sampling(cfg: RunConfig) -> Iterator[Problem]:
    r = cfg.rollout
    if r.over_sampling_batch_size < r.rollout_batch_size:
        yield Problem("rollout.over_sampling_batch_size", f"{r.over_sampling_batch_size} prompts are fewer than "
                      f"rollout_batch_size {r.rollout_batch_size}", "set rollout.over_sampling_batch_size >= "
                      f"{r.rollout_batch_size} (or null = rollout_batch_size)", r.over_sampling_batch_size)
    if r.dynamic_sampling is not None and r.n_samples_per_prompt == 1:
        yield Problem("rollout.dynamic_sampling", "dynamic sampling drops groups whose rewards all agree; a group "
                      "of one always agrees, so every prompt would be dropped",
                      "set rollout.n_samples_per_prompt >= 2 or rollout.dynamic_sampling=null")


@rule
def lengths(cfg: RunConfig) -> Iterator[Problem]:
    r, d, ctx = cfg.rollout, cfg.data, cfg.rollout.context_length
    if ctx > cfg.model.max_position_embeddings:
        yield Problem("rollout.context_length", f"{ctx} exceeds model.max_position_embeddings "
                      f"{cfg.model.max_position_embeddings}", f"set rollout.context_length <= "
                      f"{cfg.model.max_position_embeddings} (or null to use it)", ctx)
    if d.max_prompt_len is not None and d.max_prompt_len > ctx - 1:
        yield Problem("data.max_prompt_len", f"{d.max_prompt_len} leaves no room to generate in a context of {ctx}",
                      f"set data.max_prompt_len <= {ctx - 1}", d.max_prompt_len)
    # prompt + response beyond the context is no error: each request's max_new_tokens is cut to the room left
    # (rlrun.rollout.handle.RolloutHandle.generate), as slime does with --rollout-max-context-len; a warning
    # says so (rlrun.config.warn.responses_cut_at_the_context)


@rule
def rollout_engine(cfg: RunConfig) -> Iterator[Problem]:
    """The engine kind's capabilities, its arguments (rollout.<args_key>: only its own, checked by its spec) and
    its own rules (rlrun.rollout.engines.<kind>.spec)."""
    r = cfg.rollout
    kind = ENGINES[r.engine]
    if kind.max_gpus_per_engine is not None and r.gpus_per_engine > kind.max_gpus_per_engine:
        wider = [e for e, spec in ENGINES.items() if spec.max_gpus_per_engine is None]
        yield Problem("rollout.gpus_per_engine", f"the {r.engine} engine runs on one device, got gpus_per_engine "
                      f"{r.gpus_per_engine}", f"set rollout.gpus_per_engine={kind.max_gpus_per_engine} or "
                      f"rollout.engine={wider[0]}", r.gpus_per_engine)
    for other, spec in ENGINES.items():
        args = r.args_of(other)
        if other != r.engine and args and spec.args_key != kind.args_key:
            yield Problem(f"rollout.{spec.args_key}", f"{other} engine arguments {sorted(args)} are set but "
                          f"rollout.engine is {r.engine}, so they would be ignored",
                          f"set rollout.engine={other} or remove rollout.{spec.args_key}", args)
    if kind.args_check is not None and r.args_of():
        yield from kind.args_check(r.args_of())
    if kind.rules is not None:
        yield from kind.rules(cfg)


@rule
def train_passthrough(cfg: RunConfig) -> Iterator[Problem]:
    """train.megatron: the backend's own config fields, checked by the backend's check (pure Python, owned by
    the train layer: rlrun.train.megatron.passthrough against the pinned megatron-core's dataclasses)."""
    kind = BACKENDS[cfg.train.backend]
    if cfg.train.megatron and not kind.passthrough_check:
        readers = [b for b, spec in BACKENDS.items() if spec.passthrough_check]
        yield Problem("train.megatron", f"megatron-core fields {sorted(cfg.train.megatron)} are set but "
                      f"train.backend is {cfg.train.backend}, so they would be ignored",
                      f"set train.backend={readers[0]} or remove train.megatron", dict(cfg.train.megatron))
    elif kind.passthrough_check:
        yield from resolve(kind.passthrough_check)(cfg)


@rule
def weight_sync(cfg: RunConfig) -> Iterator[Problem]:
    """The engine takes the run's transport, and the transport's own rule (rlrun.rollout.transports)."""
    r = cfg.rollout
    takes, transport = ENGINES[r.engine].transports(), transport_of(cfg)
    if transport not in takes:
        yield Problem("rollout.weight_sync", f"the {r.engine} engine takes weights by {' or '.join(takes)}; this run's "
                      f"transport is {transport}" + (" (auto)" if r.weight_sync == "auto" else ""),
                      f"set rollout.weight_sync={takes[0]}", r.weight_sync)
    yield from TRANSPORTS[transport].rules(cfg)
    for other in TRANSPORTS.values():  # another transport's own settings, set: they would be ignored
        if other.name != transport and other.idle is not None:
            yield from other.idle(cfg)


# ---- data, rewards, eval, checkpoints --------------------------------------------------------------------



def _rm_problems(path: str, rm_type: str) -> Iterator[Problem]:
    known = list(REWARDS)
    base = rm_type[len("boxed_"):] if rm_type.startswith("boxed_") else rm_type
    if ":" not in rm_type and base not in known:
        yield Problem(path, f"unknown reward type {rm_type!r}{did_you_mean(base, known)}",
                      f"use one of {', '.join(known)} (optionally with a boxed_ prefix) or a custom "
                      "'module.path:function'", rm_type)


# data.rm_type's form for a slime reward function (rlrun.agent.prefix.PREFIX), which reads data.rm_url as
# slime's args.rm_url (slime's on-policy distillation example posts to its teacher there)
SLIME_FUNCTION = "slime:"


@rule
def remote_reward(cfg: RunConfig) -> Iterator[Problem]:
    """rm_type remote POSTs every sample to data.rm_url (rlrun.reward.remote); eval datasets use it too; a slime
    reward function gets it as args.rm_url."""
    from urllib.parse import urlparse

    users = [("data.rm_type", cfg.data.rm_type)] + [(f"eval.datasets.{i}.rm_type", ds.rm_type)
                                                    for i, ds in enumerate(cfg.eval.datasets)]
    remote = [path for path, t in users if t in REWARDS and REWARDS[t].remote]
    url = cfg.data.rm_url
    if remote and url is None:
        yield Problem(remote[0], "rm_type remote posts each sample to a reward server, but data.rm_url is null",
                      "set data.rm_url to the server's POST endpoint (e.g. data.rm_url=http://127.0.0.1:8000/reward)",
                      "remote")
    elif url is not None and not remote and not cfg.data.rm_type.startswith(SLIME_FUNCTION):
        yield Problem("data.rm_url", f"is set ({url}) but no rm_type is remote (data.rm_type is "
                      f"{cfg.data.rm_type!r}), so it would be ignored",
                      "set data.rm_type=remote, or data.rm_url=null", url)
    elif url is not None and (urlparse(url).scheme not in ("http", "https") or not urlparse(url).netloc):
        yield Problem("data.rm_url", f"{url!r} is not an http(s) URL with a host",
                      "write it as http://HOST:PORT/PATH", url)


@rule
def data_and_eval(cfg: RunConfig) -> Iterator[Problem]:
    yield from _rm_problems("data.rm_type", cfg.data.rm_type)
    if cfg.data.prompt_data is not None and cfg.data.toy_task != "echo":
        yield Problem("data.toy_task", f"={cfg.data.toy_task} picks a packaged toy task, but data.prompt_data is "
                      f"set ({cfg.data.prompt_data}), so it would be ignored",
                      "set data.prompt_data=null to train on the toy task, or drop data.toy_task", cfg.data.toy_task)
    for i, ds in enumerate(cfg.eval.datasets):  # one equal to data.rm_type is reported there (slime: --rm-type)
        if ds.rm_type != cfg.data.rm_type:
            yield from _rm_problems(f"eval.datasets.{i}.rm_type", ds.rm_type)
    if cfg.eval.interval is not None and not cfg.eval.datasets:
        yield Problem("eval.interval", f"evaluation every {cfg.eval.interval} rollouts but eval.datasets is empty",
                      "add eval.datasets=[{name: ..., path: ..., rm_type: ...}] or set eval.interval=null")
    names = [ds.name for ds in cfg.eval.datasets]
    for name in sorted({n for n in names if names.count(n) > 1}):
        yield Problem("eval.datasets", f"two eval datasets are named {name!r}; their metrics would collide",
                      "give every eval dataset its own name", name)


@rule
def training_mode(cfg: RunConfig) -> Iterator[Problem]:
    t = cfg.train
    if t.async_train and t.colocate:
        yield Problem("train.async_train", "asynchronous training overlaps rollout and training, which needs "
                      "separate GPUs; train.colocate is true", "set train.colocate=false (and rollout.num_gpus) "
                      "or train.async_train=false")
    rc = t.recompute
    if rc.granularity == "full" and (rc.method is None or rc.num_layers is None):
        yield Problem("train.recompute", "full recompute needs a method and a number of layers",
                      "set train.recompute.method=uniform and train.recompute.num_layers=1", rc.model_dump())
    if rc.granularity != "full" and (rc.method is not None or rc.num_layers is not None):
        yield Problem("train.recompute.granularity", f"recompute method/num_layers apply to full recompute only "
                      f"(granularity is {rc.granularity})", "set train.recompute.granularity=full or method and "
                      "num_layers to null", rc.model_dump())


@rule
def routing_replay(cfg: RunConfig) -> Iterator[Problem]:
    """rollout.routing_replay (R3): the engines return the experts each MoE layer chose per token and the
    trainer routes by them. Refused where a part cannot: a dense model (no router), an engine kind without
    routed experts (EngineKind.routed_experts), a backend that does not replay the family's router
    (BackendKind.routing_replay), a slime rollout or generate function (slime's own Sample carries them,
    rollout_routed_experts, which the adapter does not carry over)."""
    r = cfg.rollout
    if not r.routing_replay:
        return
    if cfg.model.moe is None:
        yield Problem("rollout.routing_replay", f"model {cfg.model.name} is dense (model.moe is null): it has no "
                      "router whose choices could be replayed", "set rollout.routing_replay=false, or pick a MoE "
                      "model (e.g. model=qwen3-30b-a3b, model=tiny-moe)", True)
        return
    if not ENGINES[r.engine].routed_experts:
        yield Problem("rollout.routing_replay", f"rollout.engine={r.engine} does not return the routed experts of "
                      "a request (/generate's return_routed_experts)", f"use an engine that does "
                      f"({', '.join(n for n, e in ENGINES.items() if e.routed_experts)}) or "
                      "rollout.routing_replay=false", True)
    backend = BACKENDS[cfg.train.backend]
    if cfg.model.family not in backend.routing_replay:
        able = [n for n, b in BACKENDS.items() if cfg.model.family in b.routing_replay]
        yield Problem("rollout.routing_replay", f"train.backend={cfg.train.backend} does not replay routing in "
                      f"{cfg.model.family} MoE layers (it does for: {', '.join(backend.routing_replay) or 'none'})",
                      f"use train.backend={able[0]}" if able else "set rollout.routing_replay=false", True)
    elif backend.routing_replay_check:
        yield from resolve(backend.routing_replay_check)(cfg)
    for key, value in (("rollout.rollout_fn", r.rollout_fn), ("rollout.generate_fn", r.generate_fn)):
        if value is not None and str(value).startswith("slime:"):
            yield Problem(key, "a slime function keeps the routed experts on slime's own Sample "
                          "(rollout_routed_experts), which rlrun does not carry over, so nothing would be replayed",
                          "use an rlrun generate function (single_turn, an rlrun.agent Environment) or "
                          "rollout.routing_replay=false", value)


@rule
def fp8_rollout(cfg: RunConfig) -> Iterator[Problem]:
    """rollout.fp8: the engines serve block-wise FP8 weights while the trainer keeps bf16 (docs/rollout.md "FP8
    weights for the rollout"): they start from an FP8 HF dir (rlrun.runner.write_engine_init_dir) and every push
    quantizes each bucket on the trainer's GPU (rlrun.launch.train_group.push_state). Refused where that cannot
    work: hardware without FP8 units (hardware.fp8) or where SGLang re-encodes loaded FP8 weights, which a push
    does not (hardware.fp8_push); an engine kind that does not serve them (EngineKind.fp8: the hf engine); a file
    transport (its safetensors file holds the trainer's bf16 weights); a family whose HF names the quantize step
    does not cover (Family.fp8_names); MoE and MLA models (the FP8 expert push is not verified on the engine). The
    engine kind's own rules add its limits (SGLang's: rlrun.rollout.engines.sglang.spec._sglang_fp8)."""
    r, hw, m = cfg.rollout, cfg.hardware, cfg.model
    if not r.fp8:
        return
    off = "set rollout.fp8=false"
    if not hw.fp8:
        yield Problem("rollout.fp8", f"hardware={hw.name} has no FP8 matrix units (hardware.fp8 is false)",
                      f"{off}, or run on hardware with FP8 (h100, h200)", True)
    elif not hw.fp8_push:
        yield Problem("rollout.fp8", f"on hardware={hw.name} the FP8 engines re-encode FP8 weights as they load them "
                      "(e4m3fnuz on ROCm, UE8M0 scales with DeepGEMM on Blackwell) and rlrun's push sends e4m3fn "
                      "with float32 scales, so pushed weights would be read in the wrong format (hardware.fp8_push "
                      "is false)", f"{off}, or run on Hopper (h100, h200)", True)
    if not ENGINES[r.engine].fp8:
        fp8 = [n for n, e in ENGINES.items() if e.fp8]
        yield Problem("rollout.fp8", f"rollout.engine={r.engine} does not serve FP8 weights",
                      (f"use rollout.engine={' or '.join(fp8)} or " if fp8 else "use ") + "rollout.fp8=false", True)
    transport = transport_of(cfg)
    if TRANSPORTS[transport].file:
        yield Problem("rollout.fp8", f"rollout.weight_sync={transport} writes the trainer's bf16 weights to a file "
                      "that the engines load into their FP8 parameters; only a push from the trainer's memory "
                      "quantizes on the way", f"{off}, or use a push transport "
                      f"({', '.join(n for n, t in TRANSPORTS.items() if not t.file)}: one node, or engines on GPUs "
                      "of their own)", True)
    fam = FAMILIES[m.family]
    if m.moe is not None or m.mla is not None:
        yield Problem("rollout.fp8", f"model={m.name} is a {'MoE' if m.moe is not None else 'MLA'} model: the FP8 "
                      "push of its expert (or latent attention) weights is not verified on an FP8 engine (dense models "
                      "are: the FP8 push's GPU test, docs/rollout.md)", off, True)
    elif not fam.fp8_names:
        yield Problem("rollout.fp8", f"model.family={m.family} names fused linear layers in its HF checkpoint "
                      "(qkv_proj / gate_up_proj) that the quantize step (rlrun.rollout.fp8) does not cover: they "
                      "would reach the engine's FP8 parameters in bf16", off, True)


@rule
def async_mode(cfg: RunConfig) -> Iterator[Problem]:
    """Async training and partial rollouts (docs/runner.md): keys that only the async loop reads
    are refused in the sync one rather than ignored, and the staleness bound must be reachable."""
    t, r = cfg.train, cfg.rollout
    if not t.async_train:
        off = "or train.async_train=true (with train.colocate=false)"
        if r.partial_rollout:
            yield Problem("rollout.partial_rollout", "partial rollout continues requests a weight push aborted, "
                          "but the sync loop pushes only between rollouts (nothing is in flight)",
                          f"set rollout.partial_rollout=false {off}", True)
        for key, value, default in (("async_buffer_size", r.async_buffer_size, 1),
                                    ("update_weights_interval", r.update_weights_interval, 1),
                                    ("max_staleness", r.max_staleness, None)):
            if value != default:
                yield Problem(f"rollout.{key}", "only the async loop reads it; the sync loop generates each "
                              "rollout with the weights of the previous one", f"remove it {off}", value)
    if r.mask_offpolicy_in_partial_rollout and not r.partial_rollout:
        yield Problem("rollout.mask_offpolicy_in_partial_rollout", "masks the older-version tokens of partial "
                      "rollouts, and rollout.partial_rollout is false", "set rollout.partial_rollout=true or "
                      "rollout.mask_offpolicy_in_partial_rollout=false", True)
    if r.max_staleness is not None and r.max_staleness < r.update_weights_interval - 1:
        yield Problem("rollout.max_staleness", f"with a weight push every {r.update_weights_interval} rollouts the "
                      f"rollout side would wait for a version the trainer only pushes after training the rollout "
                      f"being waited for (a deadlock)", f"set rollout.max_staleness >= "
                      f"{r.update_weights_interval - 1} or lower rollout.update_weights_interval", r.max_staleness)
