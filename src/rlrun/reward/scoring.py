"""Scoring rewards (re-exported by rlrun.reward): rule-based types, remote HTTP reward models and custom functions.

    score(rm_type, response, label, metadata=None) -> float
        One response, in this process, no time limit: for the loop's cheap paths and for users'
        own evaluation scripts.
    score_batch(rm_type, responses, labels, metadatas=None, ...) -> list[float]
        Many responses with a hard per-sample time limit (worker processes); a pathological
        response scores 0 and is counted in `metrics` ("reward/timeouts", "reward/errors").

rm_type is a rule type (deepscaler, dapo, math, f1, gpqa, exact_match, random; optional boxed_
prefix), "remote" (HTTP; needs remote_url), "reward_model" (the reward engines; needs judge=, a
rlrun.reward.judge.Judge) or a custom "module.path:function". A sample's
metadata["rm_type"] overrides the batch's rm_type (mixed evaluation sets), as in slime.
"""

from __future__ import annotations

import atexit
import logging
import os
import time

from rlrun.config.kinds import REWARDS
from rlrun.reward.custom import (batch_class_scores, call_custom, is_batch_class, is_custom, is_per_group,
                                 load_function, per_group, run_sync)
from rlrun.reward.judge import judge_scores
from rlrun.reward.pool import RewardPool
from rlrun.reward.rules import RULES, rule_score

log = logging.getLogger(__name__)
_default_pool: RewardPool | None = None


class RewardError(RuntimeError):
    """The reward failed on every sample of a batch (a broken function, not a bad response): the run stops
    with the first error and its sample (rlrun.parts.sampling.score) instead of training on zeros."""


def score(rm_type: str, response: str, label, metadata: dict | None = None, *, remote_url: str | None = None,
          timeout_s: float = 30.0, max_retries: int = 3, judge=None, prompt=None) -> float:
    """Score one response in this process (remote, reward-engine and async custom functions included)."""
    rm_type = _effective_type(rm_type, metadata)
    if _remote(rm_type) or _judged(rm_type):
        return score_batch(rm_type, [response], [label], [metadata], remote_url=remote_url, timeout_s=timeout_s,
                           max_retries=max_retries, judge=judge, prompts=[prompt])[0]
    if is_custom(rm_type):
        fn = load_function(rm_type)
        if isinstance(fn, type):
            return batch_class_scores(rm_type, [response], [label], [metadata])[0]
        if is_per_group(fn):
            return float(call_custom(rm_type, [response], [label], [metadata])[0])
        return float(call_custom(rm_type, response, label, metadata))
    return rule_score(rm_type, response, label, metadata)


def _remote(rm_type: str) -> bool:
    """rm_type posts each sample to a reward server (its RewardKind's remote)."""
    return rm_type in REWARDS and REWARDS[rm_type].remote


def _judged(rm_type: str) -> bool:
    """rm_type asks the reward engines (its RewardKind's judged: reward.model, rlrun.reward.judge)."""
    return rm_type in REWARDS and REWARDS[rm_type].judged


def _in_process(rm_type: str) -> bool:
    """A rule type cheap enough to score here (its RewardKind's in_process), not worth a worker's round trip."""
    return rm_type in REWARDS and REWARDS[rm_type].in_process


def _effective_type(rm_type: str, metadata) -> str:
    override = metadata.get("rm_type") if isinstance(metadata, dict) else None
    return (override or rm_type or "").strip()


def _pool(num_workers: int | None) -> RewardPool:
    global _default_pool
    if _default_pool is None:
        _default_pool = RewardPool(num_workers or min(4, os.cpu_count() or 1))
        atexit.register(_default_pool.close)
    return _default_pool


def _check_type(rm_type: str) -> None:
    """Fail fast on a misconfigured type (a config error, unlike a bad response)."""
    if is_custom(rm_type):
        load_function(rm_type)
    elif not _remote(rm_type) and not _judged(rm_type):
        base = rm_type[len("boxed_"):] if rm_type.startswith("boxed_") else rm_type
        if base not in RULES:
            rule_score(rm_type, "", "")  # raises the error that lists the known types


def score_batch(
    rm_type: str,
    responses: list[str],
    labels: list,
    metadatas: list | None = None,
    *,
    prompts: list[str] | None = None,
    group_size: int | None = None,
    timeout_s: float = 10.0,
    remote_url: str | None = None,
    max_retries: int = 3,
    metrics: dict | None = None,
    pool: RewardPool | None = None,
    failures: list | None = None,
    judge=None,
) -> list[float]:
    """Score a batch; never raises for a bad response (it scores 0 and is counted in `metrics`).

    timeout_s: per-sample limit (per request for remote, per group times group_size for per-group
    custom functions). group_size: size of the consecutive groups a per-group custom function
    gets (None = the whole batch). metrics: a dict to which reward/count, reward/timeouts,
    reward/errors and reward/seconds are added. pool: worker processes (None = a shared default).
    failures: a list to which (index, "error text") is appended for each sample that errored or timed out.
    judge: the reward engines' rlrun.reward.judge.Judge (rm_type reward_model; its own per-request time limit and
    retries: reward.model.timeout_s, max_retries).
    """
    n = len(responses)
    if len(labels) != n or (metadatas is not None and len(metadatas) != n):
        raise ValueError(f"score_batch: {n} responses, {len(labels)} labels, "
                         f"{len(metadatas) if metadatas is not None else n} metadatas; they must match")
    metadatas = list(metadatas) if metadatas is not None else [None] * n
    types = [_effective_type(rm_type, m) for m in metadatas]
    for t in set(types):
        _check_type(t)
    t0 = time.monotonic()
    out: list[tuple[object, str]] = [(0.0, "ok")] * n
    why: dict[int, str] = {}  # index -> what went wrong (an error's text, a timeout)
    is_remote = [_remote(t) for t in types]
    remote = [i for i in range(n) if is_remote[i]]
    if remote:
        out_remote = _score_remote(remote, responses, labels, metadatas, prompts, remote_url, timeout_s, max_retries)
        for i, r in zip(remote, out_remote):
            out[i] = r
    for t in {t for t in types if is_batch_class(t)}:
        idx = [i for i in range(n) if types[i] == t]
        try:
            scores = batch_class_scores(t, [responses[i] for i in idx], [labels[i] for i in idx],
                                        [metadatas[i] for i in idx])
            for i, v in zip(idx, scores):
                out[i] = (v, "ok")
        except Exception as e:  # noqa: BLE001 - a failing reward model scores 0, counted
            log.warning("reward class %s failed: %r", t, e)
            for i in idx:
                out[i], why[i] = (0.0, "error"), f"{type(e).__name__}: {e}"
    judged = [i for i in range(n) if _judged(types[i])]
    if judged:
        for i, (value, status, error) in zip(judged, _score_judged(judge, judged, responses, labels, prompts)):
            out[i] = (value, status)
            if status != "ok":
                why[i] = error
    batch_types = {t for t in types if is_batch_class(t)}
    local = [i for i in range(n) if not is_remote[i] and types[i] not in batch_types and not _judged(types[i])]
    in_proc = [i for i in local if _in_process(types[i])]
    for i in in_proc:
        try:
            out[i] = (rule_score(types[i], responses[i], labels[i], metadatas[i]), "ok")
        except Exception as e:  # noqa: BLE001 - e.g. a None response; counted like a worker error
            log.warning("reward %s failed: %r", types[i], e)
            out[i], why[i] = (0.0, "error"), f"{type(e).__name__}: {e}"
    pooled = [i for i in local if not _in_process(types[i])]
    if pooled:
        _score_pooled(pooled, types, responses, labels, metadatas, group_size, timeout_s, pool, out, why)
    scores = [float(v) if s == "ok" else 0.0 for v, s in out]
    if metrics is not None:
        for key, value in (("reward/count", n), ("reward/seconds", time.monotonic() - t0),
                           ("reward/timeouts", sum(s == "timeout" for _, s in out)),
                           ("reward/errors", sum(s == "error" for _, s in out))):
            metrics[key] = metrics.get(key, 0) + value
    if failures is not None:
        failures += [(i, why.get(i) or f"the remote reward at {remote_url}: {s} after {max_retries + 1} attempts")
                     for i, (_, s) in enumerate(out) if s in ("error", "timeout")]
    return scores


def _score_remote(idx, responses, labels, metadatas, prompts, url, timeout_s, max_retries):
    from rlrun.reward.remote import remote_scores

    if not url:
        raise ValueError("rm_type=remote needs a URL: pass remote_url= (the reward server's POST endpoint)")
    payloads = [{"prompt": prompts[i] if prompts else None, "response": responses[i], "label": labels[i],
                 "metadata": metadatas[i]} for i in idx]
    return run_sync(remote_scores(url, payloads, timeout_s, max_retries))


def _score_judged(judge, idx, responses, labels, prompts):
    if judge is None:
        raise ValueError("rm_type reward_model asks the reward engines: pass judge= (a rlrun.reward.judge.Judge; a "
                         "run starts the engines when reward.model.checkpoint is set)")
    return run_sync(judge_scores(judge, [(prompts[i] if prompts else "", responses[i], labels[i]) for i in idx]))


def _score_pooled(idx, types, responses, labels, metadatas, group_size, timeout_s, pool, out, why):
    tasks, timeouts, owners = [], [], []
    group_types = [t for t in set(types[i] for i in idx) if is_custom(t) and is_per_group(load_function(t))]
    grouped = [i for i in idx if types[i] in group_types]
    size = group_size or max(len(grouped), 1)
    for start in range(0, len(grouped), size):
        members = grouped[start:start + size]
        tasks.append(("custom_group", types[members[0]], [responses[i] for i in members],
                      [labels[i] for i in members], [metadatas[i] for i in members]))
        timeouts.append(timeout_s * len(members))
        owners.append(members)
    for i in idx:
        if types[i] not in group_types:
            tasks.append(("custom" if is_custom(types[i]) else "rule", types[i], responses[i], labels[i], metadatas[i]))
            timeouts.append(timeout_s)
            owners.append(i)
    for task, owner, limit, (value, status) in zip(tasks, owners, timeouts, (pool or _pool(None)).run(tasks, timeouts)):
        if status == "error":
            log.warning("reward %s failed: %s", task[1], value)
        members = owner if isinstance(owner, list) else [owner]
        if status != "ok":
            why.update((i, str(value) if status == "error" else f"timed out after {limit:g} s") for i in members)
        if isinstance(owner, list):
            for j, i in enumerate(owner):
                out[i] = (value[j], status) if status == "ok" else (0.0, status)
        else:
            out[owner] = (value, status)
