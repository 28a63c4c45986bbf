"""The trainer's block of a step: GPU memory swaps around training and the weight push."""
from __future__ import annotations

from contextlib import contextmanager

from rlrun.config.kinds import TRANSPORTS

PAUSE_RECHECK_S = 1.0  # SGLang 0.5.16's abort-mode pause waits this long between its checks for in-flight requests


class Offload:
    def __init__(self, cfg, plan, trainer, engines, weights):
        self.cfg, self.plan, self.trainer, self.engines, self.weights = cfg, plan, trainer, engines, weights

    @contextmanager
    def training(self, version: int, timer, push: bool = True):
        """The trainer's part of a step (the block), ending with the weight sync to `version`
        (push=False: no sync this step, async's rollout.update_weights_interval).

        Restarted engines are held out of the router from here to the sync (their weights would
        be older than the others' afterwards), and the sync includes them.
        Offload (docs/runner.md): colocated with rollout.offload, the engines lend the trainer
        their GPU memory for the block and get it back around the weight push, in the order
        SGLang needs (docs/rollout.md); with the trainer offloaded (plan.offload_train: train.offload, or auto from
        the memory estimate) the trainer holds the GPU only here:
            [pause, release weights+kv_cache+cuda_graph] [trainer onload] -> block
            from memory (IPC, NCCL): -> [resume weights] -> push + verify -> [trainer offload]
            a file (disk):           -> export -> [trainer offload] [resume weights] -> push + verify
            -> [resume kv_cache+cuda_graph, continue]
        The trainer pushes from its GPU memory (CUDA IPC handles, NCCL), so it offloads after the
        push; the disk export is a file, so the trainer leaves first. The bracketed calls are
        timed as time/offload_s, export and push as time/weight_sync_s. An error in the block
        leaves the engines released: the run is going down, and teardown stops them.
        SGLang does not keep released weights (they read back as garbage after a resume), so a
        block without a push (async's update_weights_interval) releases only kv_cache+cuda_graph.
        A resident trainer (the plan found trainer and engines fit together) never moves, and the lent engines
        release only their KV cache: their weights stay and take the push where they are:
            [pause, release kv_cache] -> block -> push + verify -> [resume kv_cache, continue]
        Each bracketed call is also timed on its own (offload/pause_s, drain_s, release_s, resume_s, continue_s,
        trainer_s: Timer.part), so a slow offload says which call was slow."""
        lend = self.cfg.train.colocate and self.cfg.rollout.offload
        swap = self.plan.offload_train
        keep = lend and not swap  # the engines keep weights and graphs: only the KV cache makes room
        disk = TRANSPORTS[self.plan.weight_sync].file and push  # a file transport: the trainer leaves first
        self.engines.defer_restarts()
        if lend or swap:
            with timer("offload"):
                if lend:
                    # release needs idle engines (SGLang asserts it). Requests the rollout no longer waits for are
                    # aborted and waited out first, at the drain's 50 ms poll: SGLang's abort-mode pause re-checks
                    # for in-flight requests only once a second (tokenizer_manager.pause_generation; the engines'
                    # liveness probes must not hold its lock either: EngineKind.probe_path), which cost
                    # 1.0 s in most steps (2026-11-28, docs/benchmarks.md). That settle is bounded by the second it
                    # saves (something still sending, e.g. a custom rollout's stray requests, is stopped by the pause
                    # itself); the drain after the pause is the bounded one that must end idle.
                    timeout_s = self.cfg.rollout.weight_sync_timeout_s
                    with timer.part("offload/drain"):
                        self.engines.abort_all()
                        self.engines.drain(min(PAUSE_RECHECK_S, timeout_s), must=False)
                    with timer.part("offload/pause"):
                        self.engines.pause("abort")
                    with timer.part("offload/drain"):
                        self.engines.drain(timeout_s)
                    with timer.part("offload/release"):
                        self.engines.release_memory(["kv_cache"] if keep else None if push
                                                    else ["kv_cache", "cuda_graph"])  # None = all
                if swap:
                    with timer.part("offload/trainer"):
                        self.trainer.onload()
        yield
        want = None
        if disk:
            with timer("weight_sync"):
                want = self.weights.export()
        if (swap and (disk or not push)) or (lend and push and not keep):
            with timer("offload"):
                if swap and (disk or not push):
                    with timer.part("offload/trainer"):
                        self.trainer.offload()
                if lend and push and not keep:
                    with timer.part("offload/resume"):
                        self.engines.resume_memory(["weights"])  # SGLang loads the update into these
        if push:
            with timer("weight_sync"):
                # lent engines stay paused after the push until their KV cache is back (below); they were drained
                # and flushed before the release and have been paused since: the push need not drain them again
                self.weights.push_all(version, want, resume=not lend, flushed=lend)
        if (swap and push and not disk) or lend:
            with timer("offload"):
                if swap and push and not disk:
                    with timer.part("offload/trainer"):
                        self.trainer.offload()
                if lend:
                    with timer.part("offload/resume"):
                        self.engines.resume_memory(["kv_cache"] if keep else ["kv_cache", "cuda_graph"])
                    with timer.part("offload/continue"):
                        self.engines.continue_generation()
