"""Build everything a run needs from (RunConfig, Plan, run dir), run the loop, tear it all down.

    Ray cluster (embedded or joined) -> resource check -> placement group -> trainer ranks
    -> engine init dir -> engines (Ray actors) -> sglang-router -> loop.run -> plot

Teardown runs on success, on errors and on SIGINT/SIGTERM (turned into exceptions here), in
reverse order, so no engine, router or embedded Ray process outlives the run.
"""
from __future__ import annotations

import signal
import statistics
from contextlib import ExitStack, contextmanager
from pathlib import Path

from rlrun import checkpoint as ckpt
from rlrun import loop
from rlrun.launch import steps
from rlrun.metrics import METRICS_FILE, MetricsLogger, plot, read_metrics

ENGINE_INIT_DIR = "engine_init"
WEIGHT_SYNC_DIR = "weight_sync"  # the latest trainer weights, read by the engines (and restarts)
SUMMARY_WINDOW = 5  # steps averaged for the first/last reward of the summary
MAX_DRAWS = 8  # dynamic sampling: prompt rounds per rollout before training on what was kept


class WeightSyncError(RuntimeError):
    pass


def tokenizer_for(cfg):
    """checkpoint.hf's tokenizer, or the toy tokenizer built offline for random-init models."""
    if cfg.checkpoint.hf:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(cfg.checkpoint.hf)
    from rlrun.data.toy import build_toy_tokenizer

    return build_toy_tokenizer()


def write_engine_init_dir(cfg, tokenizer, out: Path) -> str:
    """An HF dir the engines start from: checkpoint.hf itself, or the random init the trainer
    builds too (same seed), with the tokenizer's special-token ids in its config."""
    if cfg.checkpoint.hf:
        return cfg.checkpoint.hf
    from transformers.utils import logging as hf_logging

    from rlrun.train.hf_model import build_causal_lm

    hf_logging.disable_progress_bar()  # the run's own progress bar is the only one on screen
    model = build_causal_lm(cfg.model, None, cfg.run.seed)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        setattr(model.config, name, getattr(tokenizer, name))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


class Run:
    """What loop.run uses: the trainer, the engines behind the router, data, metrics, checkpoints."""

    check_stop = staticmethod(lambda: None)  # run() sets StopRequest.check: raises after SIGINT/SIGTERM

    def __init__(self, cfg, plan, run_dir: Path, stack: ExitStack):
        import ray  # fail here, before any work, if the runtime stack is missing

        from rlrun.launch import cluster
        from rlrun.launch.engines import start_engines
        from rlrun.launch.env import actor_env
        from rlrun.launch.placement import Placement
        from rlrun.launch.train_group import TrainGroup
        from rlrun.rollout.engines import EngineGroup
        from rlrun.rollout.router import Router

        self.cfg, self.plan, self.run_dir = cfg, plan, Path(run_dir)
        self.save_dir = Path(cfg.checkpoint.save or self.run_dir / "checkpoints")
        vendor = cfg.hardware.vendor
        callers = ray.is_initialized()  # a caller's connection (a test, a notebook) stays theirs
        ray_cluster = cluster.start(cfg.cluster.address, vendor, plan)
        if not callers:
            stack.callback(ray_cluster.shutdown)
        cluster.check_resources(plan, vendor, cluster.alive_nodes())
        placement = Placement(plan, vendor)
        stack.callback(placement.remove)
        env = actor_env(vendor, cfg.hardware.env, plan.env)
        self.tokenizer = tokenizer_for(cfg)
        model_dir = write_engine_init_dir(cfg, self.tokenizer, self.run_dir / ENGINE_INIT_DIR)
        self.trainer = TrainGroup(cfg, plan, placement, env)
        stack.callback(self.trainer.shutdown)
        engines, restart = start_engines(cfg, plan, placement, env, model_dir, str(self.run_dir / "logs"))
        self.router = Router.from_config(cfg.rollout, self.run_dir / "logs")
        stack.callback(self.router.stop)
        self.router.start()
        self.engines = EngineGroup(self.router, engines, restart)
        stack.callback(self.engines.stop)
        self.engines.start()
        # Weight sync state: the engines' weight dtype (the trainer fingerprints in it), the latest
        # verified (version, checksum) for restarts, the latest push's metrics for the step's row.
        self._engine_dtype = self.engines.weight_dtype() if cfg.rollout.engine == "hf" else None
        self._synced: tuple[int, str] | None = None
        self._sync_metrics: dict[str, float] = {}
        self.engines.resync = self._resync
        self.prompts = steps.load_prompts(cfg, self.tokenizer, self.run_dir)
        self.model_dir = model_dir
        # rollout.generate_fn / data.source (docs/agents.md); None = one request per sample / the prompts
        self.generate_fn = steps.load_generate_fn(cfg.rollout.generate_fn)
        self.source = steps.load_source(cfg, self.prompts)
        self._eval_sets: dict[str, list] = {}
        self.logger: MetricsLogger | None = None
        self._stack = stack

    # -- loop phases ------------------------------------------------------------------------
    def collect(self, rollout_id: int, sampling):
        """rollout_batch_size prompts x n samples, generated and scored -> (all samples, kept
        samples, metrics). With dynamic sampling, more rounds of over_sampling_batch_size prompts
        until rollout_batch_size groups carry signal (at most MAX_DRAWS rounds)."""
        import time

        from rlrun.data import GroupCollector, split_groups

        r = self.cfg.rollout
        n = r.n_samples_per_prompt
        collector = GroupCollector(r.rollout_batch_size, keep=steps.group_filter(r.dynamic_sampling))
        per_round = r.rollout_batch_size if r.dynamic_sampling is None else r.over_sampling_batch_size
        samples, info = [], {"rollout/retries": 0.0, "time/reward_s": 0.0}
        while not collector.done and collector.rounds < MAX_DRAWS:
            if self.source is None:
                new = steps.make_samples(self.prompts.next_batch(collector.prompts_to_request(per_round)), n,
                                         collector.generated)
            else:
                new = [s for g in self.source.sample(collector.prompts_to_request(per_round)) for s in g]
            if not new:
                raise RuntimeError(f"the prompt data ran out after {self.prompts.epoch} epochs (data.num_epochs="
                                   f"{self.cfg.data.num_epochs}); raise data.num_epochs or lower rollout.num_rollout")
            seeds = [steps.request_seed(self.cfg.run.seed, rollout_id, len(samples) + i) for i in range(len(new))]
            for k, v in self._generate(new, sampling, seeds).items():
                info[k] = info.get(k, 0.0) + v
            t0 = time.perf_counter()
            for k, v in steps.score(new, self.cfg.data.rm_type, n).items():
                info[k] = info.get(k, 0.0) + v
            info["time/reward_s"] += time.perf_counter() - t0
            samples += new
            collector.add(split_groups(new, n))
        info.update(collector.metrics())
        kept = [s for g in collector.kept[:r.rollout_batch_size] for s in g]
        if self.source is not None:  # what was generated but not trained on goes back to the source
            trained = {id(s) for s in kept}
            self.source.add_samples([g for g in split_groups(samples, n) if id(g[0]) not in trained])
        return samples, kept, info

    def _generate(self, samples, sampling, seeds) -> dict[str, float]:
        """Fills `samples` through the engines; returns rollout/retries (and the generate function's counters)."""
        if self.generate_fn is None:
            return {"rollout/retries": float(steps.generate(self.router.url, self.cfg.rollout, samples, sampling, seeds))}
        from rlrun.agent.rollout import generate

        return generate(self.generate_fn, self.router.url, self.cfg.rollout, self.tokenizer, samples, sampling, seeds,
                        self.model_dir)

    # -- weight sync -------------------------------------------------------------------------
    # rollout.weight_sync (plan.weight_sync, auto resolved): "tensor" and "distributed" are pushed
    # by the trainer's lead rank itself (TrainGroup.push_weights: the tensors never pass through
    # this driver) and verified by fingerprint; "disk" is a safetensors file under the run dir,
    # loaded by every engine and verified by sha256. SGLang servers have no checksum endpoint: for
    # rollout.engine=sglang the check is that every engine reports the pushed weight_version.

    def sync_weights(self, version: int, only_if_stale: bool = False) -> None:
        """Trainer weights -> every engine, verified. only_if_stale: skip the push when the engines
        already hold the weights (a fresh random init: the engines loaded the same init from
        engine_init/); never skipped for sglang engines, which cannot be asked."""
        if only_if_stale and self.cfg.rollout.engine == "hf" and self._engines_hold():
            return
        want = self._export() if self.plan.weight_sync == "disk" else None
        self.engines.sync(lambda urls: self._push(version, urls, want))

    def _engines_hold(self) -> bool:
        """Whether every engine holds the trainer's weights (compared without pushing anything)."""
        kind = self._check_kind()
        if kind == "sha256":
            want = self.trainer.export_weights(None)
        else:
            want = self.trainer.push_weights([], **self._push_args(0))["fingerprint"]
        return all(c == want for c in self.engines.checksums(kind).values())

    def _check_kind(self) -> str:
        return "sha256" if self.plan.weight_sync == "disk" else "fingerprint"

    def _push_args(self, version: int) -> dict:
        r = self.cfg.rollout
        return dict(transport=self.plan.weight_sync, version=version, bucket_bytes=r.weight_sync_bucket_mb << 20,
                    engine_dtype=self._engine_dtype, backend="gloo" if self.cfg.hardware.vendor == "cpu" else "nccl",
                    copies=r.gpus_per_engine if r.engine == "sglang" else 1,
                    # the engine ties lm_head to the embedding it receives: sending it would only double that tensor
                    tied=("lm_head.weight",) if self.cfg.model.tie_word_embeddings else ())

    def _export(self) -> str:
        """disk: the trainer writes its weights under the run dir; returns their sha256."""
        return self.trainer.export_weights(str(self.run_dir / WEIGHT_SYNC_DIR))

    def _push(self, version: int, urls: list[str], want: str | None = None) -> None:
        """The engines at `urls` get the trainer's weights as `version`; verified. disk: `want` is
        the export's checksum (the file is already written)."""
        if self.plan.weight_sync == "disk":
            self.engines.update_weights_from_disk(str(self.run_dir / WEIGHT_SYNC_DIR), str(version), urls)
        else:
            out = self.trainer.push_weights(urls, **self._push_args(version))
            want = out["fingerprint"]
            if out["bytes"]:
                # bytes per engine / the lead rank's push seconds (the export's gather is not in it)
                self._sync_metrics = {"perf/weight_sync_gb_per_s": out["bytes"] / out["seconds"] / 1e9,
                                      "perf/weight_sync_gb": out["bytes"] / 1e9}
        self._verify(version, urls, want)
        self._synced = (version, want)

    def _verify(self, version: int, urls: list[str], want: str) -> None:
        if self.cfg.rollout.engine == "hf":
            kind = self._check_kind()
            bad = {url: c[:12] for url, c in self.engines.checksums(kind, urls).items() if c != want}
            if bad:
                raise WeightSyncError(f"weight sync to version {version} ({self.plan.weight_sync}): engines {bad} "
                                      f"disagree with the trainer ({kind} {want[:12]}) after the push; the engine "
                                      f"model does not match model.*")
        stale = {url: v for url, v in self.engines.versions(urls).items() if v != str(version)}
        if stale:
            raise WeightSyncError(f"weight sync to version {version}: engines report versions {stale}")

    def _resync(self, url: str) -> None:
        """EngineGroup's restart callback (outside Run.training: inside it restarts are deferred
        to the block's own sync): the restarted engine at `url` gets the version the others serve."""
        if self._synced is None:
            return  # nothing pushed yet: the engines serve the init the restarted one loaded too
        version, want = self._synced
        self._push(version, [url], want)
        if self.cfg.train.offload:
            self.trainer.offload()  # the push onloaded it (megatron's export); the rollout has the GPU

    @contextmanager
    def training(self, version: int, timer):
        """The trainer's part of a step (the block), ending with the weight sync to `version`.

        Restarted engines are held out of the router from here to the sync (their weights would
        be older than the others' afterwards), and the sync includes them.
        Offload (docs/runner.md): colocated with rollout.offload, the engines lend the trainer
        their GPU memory for the block and get it back around the weight push, in the order
        SGLang needs (docs/rollout.md); with train.offload the trainer holds the GPU only here:
            [pause, release weights+kv_cache+cuda_graph] [trainer onload] -> block
            tensor/distributed: -> [resume weights] -> push + verify -> [trainer offload]
            disk:               -> export -> [trainer offload] [resume weights] -> push + verify
            -> [resume kv_cache+cuda_graph, continue]
        The trainer pushes from its GPU memory (CUDA IPC handles, NCCL), so it offloads after the
        push; the disk export is a file, so the trainer leaves first. The bracketed calls are
        timed as time/offload_s, export and push as time/weight_sync_s. An error in the block
        leaves the engines released: the run is going down, and teardown stops them."""
        lend = self.cfg.train.colocate and self.cfg.rollout.offload
        swap = self.cfg.train.offload
        disk = self.plan.weight_sync == "disk"
        self.engines.defer_restarts()
        if lend or swap:
            with timer("offload"):
                if lend:
                    self.engines.pause("abort")  # release needs idle engines (the rollout is over)
                    self.engines.release_memory()  # tags None = all
                if swap:
                    self.trainer.onload()
        yield
        want = None
        if disk:
            with timer("weight_sync"):
                want = self._export()
        if (swap and disk) or lend:
            with timer("offload"):
                if swap and disk:
                    self.trainer.offload()
                if lend:
                    self.engines.resume_memory(["weights"])  # SGLang loads the update into these
        with timer("weight_sync"):
            self.engines.sync(lambda urls: self._push(version, urls, want))
        if (swap and not disk) or lend:
            with timer("offload"):
                if swap and not disk:
                    self.trainer.offload()
                if lend:
                    self.engines.resume_memory(["kv_cache", "cuda_graph"])
                    self.engines.continue_generation()

    def evaluate(self, rollout_id: int) -> dict[str, float]:
        from rlrun.rollout.client import Sampling

        e = self.cfg.eval
        sampling = Sampling(max_new_tokens=e.max_response_len, temperature=e.temperature, top_p=e.top_p,
                            top_k=self.cfg.rollout.top_k, stop=tuple(self.cfg.rollout.stop or ()))
        out: dict[str, float] = {}
        for ds in e.datasets:
            if ds.name not in self._eval_sets:
                self._eval_sets[ds.name] = steps.load_prompts(self.cfg, self.tokenizer, self.run_dir, path=ds.path,
                                                              train=False).items
            samples = steps.make_samples(self._eval_sets[ds.name], e.n_samples_per_prompt, 0)
            seeds = [steps.request_seed(self.cfg.run.seed + 1, rollout_id, i) for i in range(len(samples))]
            self._generate(samples, sampling, seeds)
            steps.score(samples, ds.rm_type, e.n_samples_per_prompt)
            out.update(steps.rollout_metrics(samples, prefix=f"eval/{ds.name}"))
        if out:
            out["eval/reward_mean"] = statistics.fmean(v for k, v in out.items() if k.endswith("/reward_mean"))
        return out

    def save(self, rollout_id: int) -> None:
        where = ckpt.iter_dir(self.save_dir, rollout_id + 1)
        self.trainer.save(str(ckpt.trainer_dir(where)))
        ckpt.write_driver_state(where, ckpt.DriverState.capture(rollout_id + 1, (self.source or self.prompts).state_dict()))
        ckpt.mark_latest(self.save_dir, where)

    def restore(self) -> int:
        """Load the newest checkpoint when resuming; bring the engines to the trainer's weights."""
        start = 0
        source = self.cfg.checkpoint.load or (self.save_dir if self.cfg.run.resume != "never" else None)
        found = ckpt.find_latest(source) if source else None
        if found is None and (self.cfg.run.resume == "must" or self.cfg.checkpoint.load):
            raise FileNotFoundError(f"no complete checkpoint under {source} (looked for {source}/{ckpt.LATEST}); "
                                    f"fix checkpoint.load or use run.resume=auto to start fresh")
        if found is not None:
            self.trainer.load(str(ckpt.trainer_dir(found)))
            state = ckpt.read_driver_state(found)
            state.restore_rng()
            (self.source or self.prompts).load_state_dict(state.data_state)
            start = state.next_rollout
            print(f"[rlrun] resumed from {found} at rollout {start}", flush=True)
        # Fresh start: the engines loaded the trainer's init (verified, pushed only if they differ,
        # e.g. a bf16 export from the megatron backend). Resumed: the checkpoint's weights are pushed.
        self.sync_weights(version=start, only_if_stale=found is None)
        if self.cfg.train.offload:
            self.trainer.offload()  # the first rollout's engines get the GPU to themselves
        self.logger = MetricsLogger(self.run_dir, self.cfg, total=self.cfg.rollout.num_rollout, start=start)
        self._stack.callback(self._finish)
        return start

    def log(self, rollout_id: int, metrics: dict[str, float]) -> None:
        self.logger.log(rollout_id, {**metrics, **self._sync_metrics})
        self._sync_metrics = {}

    def _finish(self) -> None:
        self.logger.close()
        if (self.run_dir / METRICS_FILE).exists():
            plot(self.run_dir)

    def summary(self) -> dict:
        rows = read_metrics(self.run_dir / METRICS_FILE)
        rewards = [r["rollout/reward_mean"] for r in rows]
        w = min(SUMMARY_WINDOW, len(rewards))
        return {"run_dir": str(self.run_dir), "steps": len(rows),
                "reward_first": statistics.fmean(rewards[:w]) if w else None,
                "reward_last": statistics.fmean(rewards[-w:]) if w else None,
                "checkpoint": str(ckpt.find_latest(self.save_dir) or "")}


def check_supported(cfg) -> None:
    """Refuse, before Ray starts, settings this runner would otherwise silently ignore."""
    problems = []
    if cfg.algo.advantage_estimator == "ppo" and cfg.train.backend != "torch":
        problems.append(f"algo.advantage_estimator=ppo needs a critic, which train.backend={cfg.train.backend} "
                        "does not build yet; use train.backend=torch, or grpo, gspo, cispo or reinforce_plus_plus")
    if cfg.train.async_train:
        problems.append("train.async_train=true is not implemented by the runner; set it to false")
    if cfg.rollout.partial_rollout:
        problems.append("rollout.partial_rollout=true is not implemented by the runner; set it to false")
    if problems:
        raise ValueError("unsupported settings:\n  " + "\n  ".join(problems))


class StopRequest:
    """SIGINT / SIGTERM: raised at once as SystemExit(128 + signal), and remembered. An exception
    raised while Python runs a finalizer or a weakref callback is printed and dropped, so the loop
    also checks between rollouts, and a run that finishes after a lost stop request still exits
    non-zero (seen once in CI: a SIGINTed run went on to its last step and exited 0)."""

    def __init__(self):
        self.signum: int | None = None

    def handler(self, signum, frame):
        self.signum = signum
        raise SystemExit(128 + signum)

    def check(self) -> None:
        if self.signum is not None:
            raise SystemExit(128 + self.signum)


def run(cfg, plan, run_dir) -> dict:
    """Run the job; returns a summary (run dir, steps, first/last mean reward, checkpoint)."""
    check_supported(cfg)
    stop = StopRequest()
    previous = {s: signal.signal(s, stop.handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with ExitStack() as stack:
            r = Run(cfg, plan, Path(run_dir), stack)
            r.check_stop = stop.check
            summary = loop.run(r)
            stop.check()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if summary["steps"]:
        print(f"[rlrun] done: {summary['steps']} steps, reward {summary['reward_first']:.3f} (first "
              f"{SUMMARY_WINDOW}) -> {summary['reward_last']:.3f} (last {SUMMARY_WINDOW}); run dir "
              f"{summary['run_dir']}", flush=True)
    return summary
