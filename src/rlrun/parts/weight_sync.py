"""Trainer weights -> every engine, versioned and verified.

rollout.weight_sync (plan.weight_sync, auto resolved) names a transport (rlrun.rollout.transports):
one that pushes from the trainer's memory (IPC, NCCL) is run by the trainer's lead rank itself
(TrainGroup.push_weights: the tensors never pass through this driver) and verified by fingerprint;
a file transport (disk; delta: only the changed bytes, pulled into each engine host's local checkpoint) is written by
the trainer under the run dir, loaded by every engine and verified by sha256. An engine kind without a checksum endpoint (SGLang's) is checked by the
weight_version every engine reports.

Every push runs inside `versions.pushing(version)` (new generation requests wait for it to end);
with rollout.partial_rollout the requests in flight are aborted first (/abort_request) and the
rollout side continues them under the new weights (rlrun.rollout.handle).
"""
from __future__ import annotations

import time
from pathlib import Path

from rlrun.config.kinds import ENGINES, TRANSPORTS
from rlrun.config.sizes import push_flushes_cache
from rlrun.guard.invariants import Invariants, WeightSyncError  # noqa: F401 - WeightSyncError: public name

WEIGHT_SYNC_DIR = "weight_sync"  # the latest trainer weights, read by the engines (and restarts)


class WeightSync:
    def __init__(self, cfg, plan, run_dir: Path, trainer, engines, versions, invariants=None):
        self.cfg, self.plan, self.run_dir = cfg, plan, Path(run_dir)
        self.trainer, self.engines, self.versions = trainer, engines, versions
        # the engines' weight dtype (the trainer fingerprints in it), the latest verified
        # (version, checksum) for restarts, the latest push's metrics for the step's row
        self.kind = ENGINES[cfg.rollout.engine]
        self.transport = TRANSPORTS[plan.weight_sync]
        self.file_args = self.transport.file_args(cfg, self.run_dir)  # a file transport's settings (write, receive)
        self.engine_dtype = engines.weight_dtype() if self.kind.checksums else None
        self.synced: tuple[int, str | None] | None = None  # the checksum: None where the engines have none
        self.last_metrics: dict[str, float] = {}
        engines.resync = self.resync
        # the weight_sync run invariant judges a disagreement (stop: WeightSyncError; warn: logged)
        self.invariants = invariants if invariants is not None else Invariants(cfg)

    def sync(self, version: int, only_if_stale: bool = False) -> None:
        """Trainer weights -> every engine, verified. only_if_stale: skip the push when the engines
        already hold the weights (a fresh random init: the engines loaded the same init from
        engine_init/); never skipped for sglang engines, which cannot be asked."""
        if only_if_stale and self.kind.checksums and self.engines_hold():
            return
        self.push_all(version, self.export() if self.transport.file else None)

    def push_all(self, version: int, want: str | None = None, resume: bool = True, flushed: bool = False) -> None:
        """Every engine (held restarts included) gets `version`; disk: `want` is the export's checksum.
        resume=False: a tensor push leaves the engines paused (the caller resumes their KV cache first).
        flushed: the caller drained and flushed the engines and kept them paused since (Offload's lent engines; a
        restart held meanwhile starts empty), so the push does not drain them again."""
        with self.versions.pushing(version):
            if self.cfg.rollout.partial_rollout:
                self.engines.abort_all()
            # idle and flushed before the weights change (EngineGroup.drain)
            drain = push_flushes_cache(self.cfg) and not flushed
            self.engines.sync(lambda urls: self.push(version, urls, want, resume, drain))

    def engines_hold(self) -> bool:
        """Whether every engine holds the trainer's weights (compared without pushing anything)."""
        kind = self.check_kind()
        if kind == "sha256":
            want = self.trainer.export_weights(None)
        else:
            want = self.trainer.push_weights([], **self.push_args(0))["fingerprint"]
        return all(c == want for c in self.engines.checksums(kind).values())

    def check_kind(self) -> str:
        return self.transport.check

    def push_args(self, version: int, resume: bool = True) -> dict:
        r = self.cfg.rollout
        return dict(transport=self.plan.weight_sync, version=version, resume=resume,
                    bucket_bytes=r.weight_sync_bucket_mb << 20,
                    engine_dtype=self.engine_dtype, backend="gloo" if self.cfg.hardware.vendor == "cpu" else "nccl",
                    copies=r.gpus_per_engine if self.kind.sharded_weights else 1,
                    flattened=self.transport.flattened(self.kind),
                    # a fingerprint only where the engines can be asked for theirs (verify compares it)
                    fingerprint=self.kind.checksums,
                    timeout_s=r.weight_sync_timeout_s,
                    # never SGLang's flush inside the update: it asserts an idle engine and its scheduler dies on a
                    # busy one; push_all drained and flushed the engines first where the loop allows it
                    flush_cache=False,
                    nccl_env={k: self.plan.env.get(k, v) for k, v in self.kind.nccl_env.items()},
                    # the engine ties lm_head to the embedding it receives: sending it would only double that tensor
                    tied=("lm_head.weight",) if self.cfg.model.tie_word_embeddings else (),
                    # rollout.fp8: the engines hold block-wise FP8 linear weights; the lead rank quantizes each bucket
                    fp8=r.fp8)

    def export(self) -> str:
        """A file transport: the trainer writes its weights under the run dir; returns their sha256."""
        return self.trainer.export_weights(str(self.run_dir / WEIGHT_SYNC_DIR), self.plan.weight_sync, self.file_args)

    def push(self, version: int, urls: list[str], want: str | None = None, resume: bool = True,
             drain: bool = False) -> None:
        """The engines at `urls` get the trainer's weights as `version`; verified. disk: `want` is the export's
        checksum (the file is already written). resume: see push_all. drain: wait until they are idle and flushed
        first (inside EngineGroup.sync, so that a dead engine is left out as for the push itself). The step's row gets
        the driver's parts of the push too, beside the pushing rank's (rlrun.rollout.engines.group.Phases), as
        weight_sync/{part}_s: drain, call (the trainer's call beyond its lead rank's push: the Ray round trip and what
        the ranks do before the first bucket), verify."""
        parts = {}
        if drain:
            t0 = time.perf_counter()
            self.engines.drain(self.cfg.rollout.weight_sync_timeout_s, urls)
            parts["drain"] = time.perf_counter() - t0
        metrics: dict[str, float] = {}
        if self.transport.receive is not None:  # the file is written: the engines' end
            if want is None:
                raise ValueError(f"weight sync by {self.plan.weight_sync}: the push needs the written file's checksum")
            metrics = self.transport.receive(self.engines, str(self.run_dir / WEIGHT_SYNC_DIR), str(version), urls,
                                             **self.file_args) or {}
        else:
            # each url's engine id: a push gathered per engine gives its TP ranks the payloads of the trainer ranks on
            # their own GPUs (TrainGroup.push_weights)
            t0 = time.perf_counter()
            out = self.trainer.push_weights(urls, **self.push_args(version, resume),
                                            engines=[self.engines.index_of(url) for url in urls])
            want = out["fingerprint"]
            # bytes per engine / the lead rank's push seconds (the export's gather is not in it)
            metrics = self.transport.metrics(out["bytes"], out["seconds"])
            if metrics:  # where the push's time went (rlrun.rollout.engines.group.Phases)
                metrics.update({f"weight_sync/{k}_s": v for k, v in out.get("phases", {}).items()})
                parts["call"] = max(time.perf_counter() - t0 - out["seconds"], 0.0)
        t0 = time.perf_counter()
        self.verify(version, urls, want)
        parts["verify"] = time.perf_counter() - t0
        self.last_metrics = {**metrics, **{f"weight_sync/{k}_s": v for k, v in parts.items()}}
        self.synced = (version, want)

    def verify(self, version: int, urls: list[str], want: str) -> None:
        bad, kind = {}, self.check_kind()
        if self.kind.checksums:
            bad = {url: c[:12] for url, c in self.engines.checksums(kind, urls).items() if c != want}
        stale = {url: v for url, v in self.engines.versions(urls).items() if v != str(version)}
        self.invariants.weight_sync(version, bad=bad, stale=stale, want=want, kind_of_check=kind,
                                    transport=self.plan.weight_sync)

    def resync(self, url: str) -> None:
        """EngineGroup's restart callback (outside the trainer's block: inside it restarts are
        deferred to the block's own sync): the restarted engine at `url` gets the version the others serve."""
        if self.synced is None:
            return  # nothing pushed yet: the engines serve the init the restarted one loaded too
        version, want = self.synced
        self.push(version, [url], want)
        if self.plan.offload_train:
            self.trainer.offload()  # the push onloaded it (megatron's export); the rollout has the GPU

    def pop_metrics(self) -> dict[str, float]:
        """The latest push's bandwidth, once (for the step's metrics row)."""
        out, self.last_metrics = self.last_metrics, {}
        return out
