"""Warnings: settings that are valid but probably not what the user meant. They are printed (stderr, or
the "warnings" list of `--json`) by validate, plan and run, and never fail a config: a rule that must
stop a job belongs in rules.py. A warning is a small function (RunConfig, overrides) -> Problems,
registered with @warning, so that adding one touches this file only."""
from __future__ import annotations

from typing import Callable, Iterable, Iterator, Sequence

from rlrun.config.errors import Problem
from rlrun.config.memory import overflow
from rlrun.config.registry import Checks
from rlrun.config.schema import RunConfig
from rlrun.config.sizes import known_sample_tokens

Warning_ = Callable[[RunConfig, Sequence[str]], Iterable[Problem]]
WARNINGS: Checks[Warning_] = Checks()
warning = WARNINGS


def check(cfg: RunConfig, overrides: Sequence[str] = ()) -> list[Problem]:
    return WARNINGS.run(cfg, overrides)


def render(problems: Sequence[Problem]) -> str:
    return "\n".join(f"warning: {p}" for p in problems)


def _set_by_user(key: str, overrides: Sequence[str]) -> bool:
    return any(o.lstrip("+~").split("=", 1)[0] == key for o in overrides)


@warning
def epochs_do_not_set_the_length(cfg: RunConfig, overrides: Sequence[str]) -> Iterator[Problem]:
    """slime ignores --num-epoch when --num-rollout is set; rlrun always has rollout.num_rollout, and
    data.num_epochs only lets the data repeat (the run stops with an error when the data runs out)."""
    if _set_by_user("data.num_epochs", overrides) and not _set_by_user("rollout.num_rollout", overrides):
        yield Problem("data.num_epochs", f"does not set the run length: rollout.num_rollout="
                      f"{cfg.rollout.num_rollout} rollouts of {cfg.rollout.rollout_batch_size} prompts do; "
                      f"data.num_epochs={cfg.data.num_epochs} only lets the prompts repeat up to that many times "
                      "(slime, too, ignores --num-epoch when --num-rollout is set)",
                      "set rollout.num_rollout = epochs x dataset rows / rollout.rollout_batch_size",
                      cfg.data.num_epochs)


@warning
def responses_cut_at_the_context(cfg: RunConfig, overrides: Sequence[str]) -> Iterator[Problem]:
    """A response limit the context cannot hold: each request's max_new_tokens is cut to context_length minus its
    prompt (rlrun.rollout.handle.RolloutHandle.generate), which is how slime reads --rollout-max-context-len
    (its SGLang rollout caps max_new_tokens at rollout_max_context_len - len(prompt))."""
    r, d, ctx = cfg.rollout, cfg.data, cfg.rollout.context_length
    lens = [("rollout", r.max_response_len)] + ([("eval", cfg.eval.max_response_len)]
                                                if cfg.eval.max_response_len != r.max_response_len else [])
    lens += [(f"eval.datasets.{i}", ds.max_response_len) for i, ds in enumerate(cfg.eval.datasets)
             if ds.max_response_len not in (None, cfg.eval.max_response_len, r.max_response_len)]
    for sec, resp in lens:
        total = resp + (d.max_prompt_len or 1)
        if total > ctx:
            yield Problem(f"{sec}.max_response_len", f"prompt ({d.max_prompt_len or 'at least 1'}) + response {resp} "
                          f"= {total} tokens exceed the context length {ctx}: responses are cut at {ctx} tokens "
                          "minus their prompt", f"lower {sec}.max_response_len to {ctx - (d.max_prompt_len or 1)} "
                          "or raise rollout.context_length, if the cut is not meant", resp)


@warning
def samples_above_the_budget(cfg: RunConfig, overrides: Sequence[str]) -> Iterator[Problem]:
    """A token budget that holds the response limit but not a whole sample: such a sample trains alone in its
    micro-batch (rlrun.train.batching.group_samples), as slime's dp_schedule places a sample above
    --max-tokens-per-gpu; the memory plan counts it (rlrun.config.memory)."""

    t, cp = cfg.train, cfg.parallelism.cp
    need = known_sample_tokens(cfg)
    if t.use_dynamic_batch_size and t.max_tokens_per_gpu and cfg.rollout.max_response_len <= \
            t.max_tokens_per_gpu * cp < need:
        yield Problem("train.max_tokens_per_gpu", f"{t.max_tokens_per_gpu} tokens per GPU hold a response but not "
                      f"a whole sample of up to {need} tokens: such a sample trains alone in its micro-batch "
                      "(slime does the same)", f"set train.max_tokens_per_gpu >= {-(-need // cp)} to pack them",
                      t.max_tokens_per_gpu)


@warning
def kl_reference_is_the_hf_checkpoint(cfg: RunConfig, overrides: Sequence[str]) -> Iterator[Problem]:
    """KL needs a reference model. slime refuses KL without --ref-load (slime/utils/arguments.py,
    slime_validate_args: `if args.kl_coef != 0 or args.use_kl_loss:` it requires ref_load to exist); rlrun
    derives checkpoint.ref from checkpoint.hf (the model the run starts from), and says so."""
    a, ck = cfg.algo, cfg.checkpoint
    kl_on = a.use_kl_loss or a.kl_coef != 0  # slime's condition (it loads the reference for either)
    if kl_on and ck.hf is not None and ck.ref == ck.hf and not _set_by_user("checkpoint.ref", overrides):
        yield Problem("checkpoint.ref", f"is null, so the KL reference is checkpoint.hf ({ck.hf}); slime refuses KL "
                      "without --ref-load", "set checkpoint.ref to the reference model to make it explicit, or "
                      "algo.use_kl_loss=false and algo.kl_coef=0 for no KL", ck.ref)
    elif kl_on and ck.hf is None and ck.ref is None and ck.load is None:  # a policy from checkpoint.load: rules.kl
        yield Problem("checkpoint.ref", "is null and so is checkpoint.hf: the KL reference is the run's own seeded "
                      "random init (the initial policy, rules.kl); slime refuses KL without --ref-load",
                      "set checkpoint.ref (or checkpoint.hf) for a trained reference, or algo.use_kl_loss=false and "
                      "algo.kl_coef=0 for no KL", None)


@warning
def real_weights_on_the_toy_task(cfg: RunConfig, overrides: Sequence[str]) -> Iterator[Problem]:
    """data=toy (data.prompt_data null) is rlrun's digit task for the tiny CPU job; with released weights it
    still runs, so say plainly what will run and how to choose a real task."""
    if cfg.checkpoint.hf is not None and cfg.data.prompt_data is None and cfg.data.source is None:
        yield Problem("data.prompt_data", f"is null: the run trains {cfg.checkpoint.hf} on rlrun's toy task "
                      f"(data={cfg.data.name}: the {cfg.data.toy_task} digit task, reward {cfg.data.rm_type}, up to "
                      f"{cfg.rollout.max_response_len} response tokens)", "for a real task: data=dapo-math-17k data.prompt_data=/path/to/dapo-math-17k.jsonl,"
                      " or your own JSONL (docs/data.md)", None)


@warning
def memory_overflow_accepted(cfg: RunConfig, overrides: Sequence[str]) -> Iterator[Problem]:
    """A memory estimate above a GPU's memory that the gate does not refuse (capability.memory_fits): checks.memory_fit=warn,
    or an overflow that rests on an uncalibrated activation estimate."""

    over = overflow(cfg) if cfg.checks.memory_fit != "off" else None
    if over and (cfg.checks.memory_fit == "warn" or not over[1]):
        yield Problem("checks.memory_fit", *over[0])
