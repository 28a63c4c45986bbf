"""Run invariants: registered checks run at fixed points of every rollout (docs/observability.md).

Each check has a name (a field of checks.severity: stop | warn | off), the events it looks at and
a metric `checks/<name>` that goes into the rollout's metrics.jsonl row. A violated check with
severity stop raises InvariantError naming the check, the rollout, the cause and the setting that
turns it into a warning; warn prints the same line and the run goes on.

Events (who calls them):
    resume       rlrun.loops.phases.resume, once the start rollout is known
    samples      rlrun.loops.phases.record, every rollout: all generated samples and the kept ones
    batch        rlrun.loops.phases.train, after the advantages, before any optimizer step
    trained      rlrun.loops.phases.train, after the optimizer steps, before the weight push and the save
    weight_sync  rlrun.parts.weight_sync.WeightSync.verify, after every push
    end          rlrun.loops.phases.summary
A stop in `batch` or `trained` comes before the weight push and the checkpoint, so the newest
checkpoint is the last good state and run.resume=auto continues from it exactly.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional

from rlrun.config.kinds import ESTIMATORS
from rlrun.data.groups import groups_of
from rlrun.reward.rules import top_score
from rlrun.rollout.handle import version_number

MISMATCH = "train/train_rollout_logp_abs_diff"  # mean |train - rollout| log-prob per loss token
# truncation_reward judges a rollout only with at least this many truncated AND this many complete
# samples. The correlation is highest when the k samples of the rarer kind all score on one side of
# the others; with reward independent of truncation that happens by chance with probability 2 x 2^-k
# (each lands above or below the median reward like a coin): k=8 makes it 0.78%, under 1 rollout in
# 100 (k=4: 12.5%, a warning every few rollouts on a job where nearly every sample is truncated).
TRUNCATION_MIN_EACH = 8


class InvariantError(RuntimeError):
    """A run invariant with severity stop failed; `check` names it."""

    def __init__(self, check: str, message: str):
        super().__init__(message)
        self.check = check


class WeightSyncError(InvariantError):
    """An engine disagrees with the trainer after a weight push (check weight_sync)."""

    def __init__(self, *args):  # (message) or (check, message)
        super().__init__("weight_sync" if len(args) == 1 else args[0], args[-1])


Verdict = Optional[tuple[float, Optional[str]]]  # (metric value, problem or None); None: not applicable


@dataclass(frozen=True)
class Check:
    name: str
    events: tuple[str, ...]
    fn: Callable[["Invariants", SimpleNamespace], Verdict]
    fix: str | Callable[["Invariants", SimpleNamespace], str]  # a callable words the fix for the event at hand
    error: type = InvariantError


CHECKS: dict[str, Check] = {}


def check(name: str, *events: str, fix, error: type = InvariantError):
    def register(fn):
        CHECKS[name] = Check(name, events, fn, fix, error)
        return fn
    return register


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


# ---- the checks --------------------------------------------------------------------------------------------

@check("samples", "samples", fix="check rollout.dynamic_sampling (over_sampling_batch_size) and the generate "
       "function: every prompt should come back with its n samples")
def samples_consumed(inv, ev) -> Verdict:
    planned = inv.cfg.rollout.rollout_batch_size * inv.cfg.rollout.n_samples_per_prompt
    frac = len(ev.kept) / planned
    return frac, None if len(ev.kept) >= planned else (
        f"{len(ev.kept)} samples kept for training of the {planned} planned (rollout_batch_size x n_samples_per_prompt)")


@check("resume_trains", "resume", "end", fix="raise rollout.num_rollout past the checkpoint's rollout to train "
       "more, or start a fresh run (run.resume=never)")
def resume_trains(inv, ev) -> Verdict:
    if inv.cfg.debug.rollout_only:
        return None
    if ev.kind == "resume":
        left = inv.cfg.rollout.num_rollout - ev.start
        return float(left), None if left > 0 or ev.start == 0 else (
            f"the run resumes at rollout {ev.start} but rollout.num_rollout={inv.cfg.rollout.num_rollout}: "
            f"it would exit having trained nothing")
    planned = inv.cfg.rollout.num_rollout - inv.start
    return float(inv.steps_trained), None if inv.steps_trained > 0 or planned <= 0 else (
        f"{planned} rollouts ran but no optimizer step was taken (every rollout kept no sample)")


@check("staleness", "samples", fix="lower rollout.async_buffer_size or raise rollout.max_staleness")
def staleness(inv, ev) -> Verdict:
    bound = inv.cfg.rollout.max_staleness
    if not inv.cfg.train.async_train or bound is None or not ev.kept:
        return None
    lag = staleness

    worst = max(lag(groups_of(ev.kept), version=ev.rollout_id))
    return float(worst), None if worst <= bound else (
        f"a trained group's oldest token is {worst} policy versions behind the trainer (bound: "
        f"rollout.max_staleness={bound})")


def broken_groups(samples: list, estimator: str, n: int, one_prompt: bool = True) -> list[str]:
    """What is wrong with the group ids of `samples` (laid out group after group). one_prompt=False: a
    group may hold samples of several prompts (a custom generate function may return a list of samples
    with prompts of their own in the prompt's group, as slime's multi-agent example does)."""
    groups, seen, out = groups_of(samples), set(), []
    for g in groups:
        gid = g[0].group_id
        if gid is None or gid < 0:
            out.append(f"{len(g)} samples have no group id ({gid})")
            continue
        if gid in seen:
            out.append(f"group {gid} is split apart (its samples are not consecutive)")
        seen.add(gid)
        if one_prompt and len({tuple(s.prompt_tokens) for s in g}) > 1:
            out.append(f"group {gid} holds samples of {len({tuple(s.prompt_tokens) for s in g})} different prompts")
        elif estimator in ESTIMATORS and ESTIMATORS[estimator].group_normalised and n > 1 and len(g) == 1:
            out.append(f"group {gid} has 1 sample: its {estimator} advantage is 0 (n_samples_per_prompt={n})")
    return out


@check("groups", "samples", fix="a generate function or data source must return each prompt's samples together, "
       "with the group_id of the prompt they answer (docs/agents.md)")
def groups(inv, ev) -> Verdict:
    bad = broken_groups(ev.kept, inv.cfg.algo.advantage_estimator, inv.cfg.rollout.n_samples_per_prompt,
                        one_prompt=inv.cfg.rollout.generate_fn is None)
    return float(len(bad)), None if not bad else "group ids broken: " + "; ".join(bad[:5]) + (
        f" (and {len(bad) - 5} more)" if len(bad) > 5 else "")


# engine_uniform judges a rollout with at least this many engine log-probs; a spread under UNIFORM_SPREAD (nats) is
# one value: sampled tokens of any model that learned or was initialised at random differ in probability (the
# random-init tiny models spread over ~1 nat; a bf16 engine's log-probs resolve ~1e-3 at -4)
UNIFORM_MIN_TOKENS = 32
UNIFORM_SPREAD = 1e-4


@check("engine_uniform", "samples", fix="the engine samples from a distribution the trainer's model does not give: "
       "compare the engine's model class with model.* (e.g. a tied lm_head in a class that never ties it: set "
       "model.tie_word_embeddings=false and export an untied checkpoint) and read the engine's load log")
def engine_uniform(inv, ev) -> Verdict:
    """Every response token's engine log-prob is one value below -1 nat: the engine serves a uniform distribution over
    exp(-value) tokens, e.g. an output layer it never loaded (2026-11-28: SGLang 0.5.16's Qwen3-MoE class builds its
    own lm_head, so a tied tiny MoE was served at exactly -ln 64 for every token, docs/benchmarks.md). A policy that
    collapsed onto its answers has log-probs near 0, not one value below -1."""
    lps = [x for s in ev.samples for x in (s.rollout_logprobs or []) if _finite(x)]
    if len(lps) < UNIFORM_MIN_TOKENS:
        return None
    lo, hi = min(lps), max(lps)
    one = hi - lo < UNIFORM_SPREAD and hi < -1.0
    return float(one), None if not one else (
        f"all {len(lps)} engine log-probs of the rollout's response tokens are {hi:.6f} = -ln {math.exp(-hi):.1f}: "
        f"the engine samples uniformly over its vocabulary")


@check("nonfinite", "samples", "batch", "trained", fix="find where the NaN/inf starts (the reward function, the "
       "loss settings, optim.lr, optim.clip_grad); run.resume=auto continues from the last checkpoint")
def nonfinite(inv, ev) -> Verdict:
    if ev.kind == "samples":
        bad = [i for i, s in enumerate(ev.samples) if not _finite(s.reward)]
        what = f"rewards of samples {bad[:5]}"
    elif ev.kind == "batch":
        bad = [i for i, a in enumerate(ev.advantages) if not bool(a.isfinite().all())]
        what = f"advantages of samples {bad[:5]}"
    else:
        bad = sorted(k for k, v in ev.metrics.items() if k.startswith("train/") and not _finite(v))
        what = ", ".join(f"{k}={ev.metrics[k]}" for k in bad[:5])
    return float(len(bad)), None if not bad else f"non-finite {what} (the step was not saved nor pushed)"


@check("logprob_mismatch", "trained", fix="the engines and the trainer compute different log-probs: check the "
       "engine dtype/model (rollout.engine and its argument section) or raise checks.logprob_mismatch_max")
def logprob_mismatch(inv, ev) -> Verdict:
    m = ev.metrics.get(MISMATCH)
    if not _finite(m):
        return None
    limit = inv.cfg.checks.logprob_mismatch_max
    return m, None if m <= limit else f"{MISMATCH}={m:.4g} is above checks.logprob_mismatch_max={limit}"


@check("logprob_jump", "trained", fix="the engines may serve other weights than the trainer's after a resume or a "
       "weight sync: compare checks/weight_sync and the checkpoint that was loaded")
def logprob_jump(inv, ev) -> Verdict:
    m = ev.metrics.get(MISMATCH)
    if not _finite(m):
        return None
    history = [x for x in inv.mismatch_history if x > 0]
    inv.mismatch_history.append(m)
    if not history:
        return None
    base = statistics.median(history)
    ratio = m / base
    c = inv.cfg.checks
    jumped = m > c.logprob_jump_floor and ratio > c.logprob_jump_factor
    after = f" (the first rollout after a resume at {inv.start})" if ev.rollout_id == inv.start and inv.start else ""
    return ratio, None if not jumped else (
        f"the train/rollout log-prob mismatch jumped to {m:.4g}, {ratio:.1f}x its median {base:.4g} over "
        f"{len(history)} earlier rollouts{after} (checks.logprob_jump_factor={c.logprob_jump_factor})")


def _agree_below_top(inv, groups: list) -> list:
    """The groups whose rewards all agree below the reward's top score (rlrun.reward.rules.top_score; any value
    for a reward whose top rlrun does not know): no signal. Agreement at the top is a solved prompt."""
    top = top_score(inv.cfg.data.rm_type)
    return [g for g in groups if len(g) > 1 and len({s.reward for s in g}) == 1 and (top is None or g[0].reward != top)]


def _zero_variance_fix(inv, ev) -> str:
    """The response length, where the agreeing groups' samples were all cut at it (the labels may not fit)."""
    base = "the task is too hard for the policy (or too easy below the reward's top score): " \
           "rollout.dynamic_sampling=nonzero_std drops these groups, or change the data"
    flat = _agree_below_top(inv, groups_of(ev.kept))
    cut = sum(all(str(getattr(s.status, "value", s.status)) == "truncated" for s in g) for g in flat)
    if not cut:
        return base
    limit = inv.cfg.rollout.max_response_len
    return (f"every sample of {cut} of these {len(flat)} groups was cut at rollout.max_response_len={limit} tokens: "
            f"raise rollout.max_response_len if the answers need more (`rlrun validate --check-paths` counts the "
            f"labels longer than it); else {base}")


@check("zero_variance", "samples", fix=_zero_variance_fix)
def zero_variance(inv, ev) -> Verdict:
    """The share of trained groups whose rewards all agree below the reward's top score: no signal. Groups that
    agree at the top score (every sample right) are solved prompts: convergence, reported as
    rollout/solved_groups and said once, not a fault."""
    gs = [g for g in groups_of(ev.kept) if len(g) > 1]
    if not gs:
        return None
    flat = sum(1 for g in gs if len({s.reward for s in g}) == 1)
    stuck = len(_agree_below_top(inv, gs)) / len(gs)
    solved = flat / len(gs) - stuck
    top = top_score(inv.cfg.data.rm_type)
    limit = inv.cfg.checks.zero_variance_max
    inv.pending["rollout/solved_groups"] = solved
    if solved > limit and not inv.said_solved:
        inv.said_solved = True
        print(f"[rlrun] rollout {ev.rollout_id}: {solved:.0%} of the trained groups are solved (every sample scores "
              f"{inv.cfg.data.rm_type}'s top reward {top:g}): the policy has learned these prompts, so they add no "
              "gradient (rollout/solved_groups in metrics.jsonl)", file=inv.out, flush=True)
    return stuck, None if stuck <= limit else (
        f"{stuck:.0%} of the trained groups have rewards that all agree below the top reward (no signal; "
        f"checks.zero_variance_max={limit})")


@check("truncation_reward", "samples", fix="truncated answers should not score higher: check the reward function "
       "(does it read a truncated answer?) and rollout.max_response_len")
def truncation_reward(inv, ev) -> Verdict:
    trunc = [1.0 if str(getattr(s.status, "value", s.status)) == "truncated" else 0.0 for s in ev.samples]
    rewards = [float(s.reward) for s in ev.samples]
    few = min(sum(trunc), len(trunc) - sum(trunc)) < TRUNCATION_MIN_EACH
    if few or len(set(rewards)) < 2 or not all(map(math.isfinite, rewards)):
        return 0.0, None  # too few of one kind to judge (e.g. max_response_len=1: nearly all truncated)
    corr = statistics.correlation(trunc, rewards)
    limit = inv.cfg.checks.truncation_corr_max
    return corr, None if corr <= limit else (
        f"reward correlates with truncation at {corr:.2f} (truncated samples score higher; "
        f"checks.truncation_corr_max={limit})")


@check("weight_sync", "weight_sync", error=WeightSyncError, fix="the engine model does not match model.* (or an "
       "engine restarted with other weights): check rollout.engine and checkpoint.hf")
def weight_sync(inv, ev) -> Verdict:
    n = len(set(ev.bad) | set(ev.stale))
    msg = []
    if ev.bad:
        msg.append(f"engines {ev.bad} disagree with the trainer ({ev.kind_of_check} {ev.want[:12]}) after the push")
    if ev.stale:
        msg.append(f"engines report versions {ev.stale}")
    return float(n), None if not n else f"weight sync to version {ev.version} ({ev.transport}): " + "; ".join(msg)


# ---- the part ----------------------------------------------------------------------------------------------

class Invariants:
    """The part the runner builds (rlrun.parts.Parts.invariants): runs the checks of each event
    with their severities from checks.severity and keeps their metrics for the rollout's row."""

    def __init__(self, cfg, run_dir: Path | None = None, out=sys.stderr):
        self.cfg, self.run_dir, self.out = cfg, run_dir, out
        self.severity = cfg.checks.severity.model_dump()
        self.pending: dict[str, float] = {}
        self.start, self.steps_trained = 0, 0
        self.mismatch_history: list[float] = []
        self.warnings: list[str] = []
        self.said_solved = False  # zero_variance: the note that groups are solved, once per run

    def run(self, kind: str, rollout_id: int | None = None, **data) -> None:
        ev = SimpleNamespace(kind=kind, rollout_id=rollout_id, **data)
        for c in CHECKS.values():
            sev = self.severity[c.name]
            if kind not in c.events or sev == "off":
                continue
            verdict = c.fn(self, ev)
            if verdict is None:
                continue
            value, problem = verdict
            key = f"checks/{c.name}"
            self.pending[key] = max(self.pending.get(key, value), value)
            if problem is None:
                continue
            where = f"at rollout {rollout_id}" if rollout_id is not None else f"({kind})"
            fix = c.fix(self, ev) if callable(c.fix) else c.fix
            line = f"run invariant {c.name!r} failed {where}: {problem}. Fix: {fix}"
            if sev == "stop":
                line += f" (checks.severity.{c.name}=warn lets the run go on)"
                print(f"[rlrun] STOP: {line}", file=self.out, flush=True)
                raise c.error(c.name, line)
            self.warnings.append(line)
            n = sum(w.startswith(f"run invariant {c.name!r}") for w in self.warnings)
            if math.log10(n).is_integer():  # the 1st, 10th, 100th ... time: the metric has every one
                again = f" ({n}th time; checks/{c.name} in metrics.jsonl has every rollout)" if n > 1 else ""
                print(f"[rlrun] warning: {line}{again}", file=self.out, flush=True)

    # the events, named for their callers
    def resume(self, start: int) -> None:
        self.start = start
        self.mismatch_history = self._history(MISMATCH)
        self.run("resume", start, start=start)

    def samples(self, rollout_id: int, samples: list, kept: list) -> None:
        self.run("samples", rollout_id, samples=samples, kept=kept)

    def batch(self, rollout_id: int, advantages: list) -> None:
        self.run("batch", rollout_id, advantages=advantages)

    def trained(self, rollout_id: int, metrics: dict) -> None:
        self.steps_trained += 1
        self.run("trained", rollout_id, metrics=metrics)

    def weight_sync(self, version: int, **data) -> None:
        self.run("weight_sync", None, version=version, **data)

    def end(self) -> None:
        self.run("end", None)

    def pop_metrics(self) -> dict[str, float]:
        out, self.pending = self.pending, {}
        return out

    def _history(self, key: str) -> list[float]:
        """`key` over the rows metrics.jsonl already holds (a resumed run continues its history)."""
        path = None if self.run_dir is None else Path(self.run_dir) / "metrics.jsonl"
        if path is None or not path.exists():
            return []
        vals = []
        for line in path.read_text().splitlines():
            try:
                v = json.loads(line).get(key)
            except json.JSONDecodeError:
                continue
            if _finite(v):
                vals.append(float(v))
        return vals


class NoChecks:
    """Parts' default (tests that build parts by hand): every event passes."""

    def __getattr__(self, name):
        if name == "pop_metrics":
            return dict
        return lambda *a, **k: None


def staleness(groups: list[list], version: int) -> list[int]:
    """Per group: the trainer's version minus the oldest version among its trained tokens."""
    def oldest(g):
        vs = [version_number(v) for s in g for v, m in zip(s.token_versions or [s.weight_version] *
                                                           len(s.response_tokens), s.effective_loss_mask) if m]
        return min(vs, default=version)
    return [version - oldest(g) for g in groups]
