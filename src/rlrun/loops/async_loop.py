"""The asynchronous RL loop (train.async_train=true; disaggregated placement only).

A producer thread runs the rollout side ahead of the trainer into a bounded queue of rollouts
(rollout.async_buffer_size); the trainer consumes them in order and pushes its weights every
rollout.update_weights_interval rollouts. Every token carries the policy version that generated
it (rlrun.rollout.handle); a rollout's staleness is the trainer's version when it trains on it
minus the oldest token version. rollout.max_staleness bounds it by admission: the producer starts
rollout q only once the engines serve version >= q - max_staleness (AReaL's
max_head_offpolicyness), so no group can exceed it; groups that do anyway are dropped and counted.

Resume: a checkpoint stores the data iterator's state as of the rollout the trainer consumed, not
the producer's: queued and in-flight rollouts are dropped with the run and generated again after
a resume (same prompts, same seeds), so no sample is trained twice (docs/runner.md).
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

from rlrun.data.groups import groups_of
from rlrun.loops import phases
from rlrun.metrics import Timer
from rlrun.parts import Parts
from rlrun.parts.sampling import rollout_metrics
from rlrun.rollout.client import Sampling
from rlrun.guard.invariants import staleness  # noqa: F401 - also the loop's public name
from rlrun.rollout.handle import RolloutStopped


@dataclass
class Produced:
    rollout_id: int
    samples: list
    kept: list
    info: dict
    data_state: dict  # the prompt iterator right after this rollout's prompts


class Producer:
    """The rollout side in a thread: rollouts start..num_rollout-1 into a queue of `size`."""

    def __init__(self, p: Parts, sampling: Sampling, start: int):
        r = p.cfg.rollout
        self.p, self.sampling, self.start, self.end = p, sampling, start, r.num_rollout
        self.max_staleness = r.max_staleness
        self.queue: queue.Queue = queue.Queue(maxsize=r.async_buffer_size)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="rollout-producer", daemon=True)

    def _check(self) -> None:
        if self.stop.is_set():
            raise _Stopped

    def _run(self) -> None:
        try:
            for q in range(self.start, self.end):
                if self.max_staleness is not None:  # admission: tokens of q will lag by <= max_staleness
                    self.p.rollout.versions.wait_at_least(q - self.max_staleness, self._check)
                t0 = time.perf_counter()
                with self.p.rollout.profiling(q):
                    samples, kept, info = self.p.rollout.collect(q, self.sampling)
                info["time/produce_s"] = time.perf_counter() - t0  # generation + rewards, in the producer
                item = Produced(q, samples, kept, info, self.p.rollout.prompts.state_dict())
                while True:
                    self._check()
                    try:
                        self.queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        pass
        except (_Stopped, RolloutStopped):
            pass
        except BaseException as exc:  # noqa: BLE001 - re-raised in the trainer's thread
            self.error = exc

    def get(self, check_stop) -> Produced:
        while True:
            check_stop()
            try:
                return self.queue.get(timeout=0.1)
            except queue.Empty:
                if self.error is not None:
                    raise RuntimeError(f"the rollout producer failed: {self.error}") from self.error

    def __enter__(self) -> "Producer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        """Stops the producer: queued rollouts are dropped, in-flight requests aborted."""
        self.stop.set()
        if self.thread.is_alive():
            self.p.rollout.versions.close()
            try:
                self.p.rollout.engines.abort_all()
            except Exception as err:  # noqa: BLE001 - teardown stops the engines anyway
                print(f"[rlrun] aborting in-flight requests at exit failed: {err}", flush=True)
        self.thread.join(timeout=60)


class _Stopped(Exception):
    pass


def run(p: Parts) -> dict:
    """Run rollouts from the resume point to rollout.num_rollout; returns a summary."""
    r = p.cfg.rollout
    start = phases.resume(p)
    with Producer(p, Sampling.from_config(r), start) as producer:
        for rollout_id in range(start, r.num_rollout):
            p.check_stop()
            t = Timer()
            with t("rollout_wait"):  # the part of generation not hidden behind training
                got = producer.get(p.check_stop)
            groups = groups_of(got.kept)
            lag = staleness(groups, version=rollout_id)  # the trainer has trained rollout_id rollouts
            fresh = [g for g, s in zip(groups, lag) if r.max_staleness is None or s <= r.max_staleness]
            kept = [s for g in fresh for s in g]
            phases.record(p, rollout_id, got.samples, kept)  # logging.rollout_records, run invariants
            metrics = {**rollout_metrics(got.samples), **got.info, "rollout/kept_samples": float(len(kept)),
                       "async/staleness_mean": sum(lag) / max(1, len(lag)), "async/staleness_max": float(max(lag, default=0)),
                       "async/stale_dropped_groups": float(len(groups) - len(fresh)),
                       "async/queued_rollouts": float(producer.queue.qsize())}
            tokens = {"rollout": sum(len(s.response_tokens) for s in got.samples)}
            push = (rollout_id + 1) % r.update_weights_interval == 0 or rollout_id + 1 == r.num_rollout
            if kept:  # 4-7 on the trainer while the producer generates; the push every interval
                trained, tokens["train"] = phases.train(p, kept, version=rollout_id + 1, t=t, push=push)
                metrics.update(trained)
            elif push:  # nothing to train: the version still advances (the producer's gate waits on it)
                with t("weight_sync"):
                    p.weights.push_all(rollout_id + 1)
            phases.end_step(p, rollout_id, metrics, t, tokens, got.data_state)
    return phases.summary(p)
