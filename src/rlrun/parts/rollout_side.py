"""The rollout side: engines behind the router (rollout.router.kind), the prompt data, generation through the
generate function (rollout.generate_fn, rlrun.rollout.generate_api), rewards, dynamic sampling.
Both loops use it; the async loop runs `collect` in its producer thread."""
from __future__ import annotations

import inspect
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from rlrun.agent.resolve import load_generate_fn
from rlrun.config.kinds import ENGINES, resolve
from rlrun.data import GroupCollector
from rlrun.data.groups import groups_of
from rlrun.data.sample import Status
from rlrun.metrics import BOARD
from rlrun.parts import sampling as steps
from rlrun.launch.env import runtime_env
from rlrun.rollout.engines.group import EngineGroup
from rlrun.rollout.client import routing_shape
from rlrun.rollout.handle import PolicyVersion, generate_samples
from rlrun.rollout.routers.protocol import run_router
from rlrun.train.profile import trace_path

MAX_DRAWS = 8  # dynamic sampling: prompt rounds per rollout before training on what was kept


class RolloutSide:
    placement: Any = None  # which nodes carry only engines (rlrun.launch.faults.engines_only); set by start()

    def __init__(self, cfg, tokenizer, run_dir: Path, router, engines, model_dir: str | None = None):
        self.cfg, self.tokenizer, self.run_dir = cfg, tokenizer, Path(run_dir)
        self.router, self.engines, self.model_dir = router, engines, model_dir
        self.versions = PolicyVersion()  # what the engines serve (WeightSync writes it)
        self.judge = None  # the reward engines' judge (rm_type reward_model), set by the runner when it starts them
        # rollout.generate_fn (a function, an Environment class, slime:<path>; docs/agents.md)
        self.generate_fn = load_generate_fn(cfg.rollout.generate_fn, cfg)
        self.prompts = steps.load_prompts(cfg, tokenizer, self.run_dir)
        self.source = steps.load_source(cfg, self.prompts)  # data.source; None = the prompts directly
        self.rollout_fn: Callable[[int], list] | None = None  # rollout.rollout_fn: slime's rollout function (rlrun.agent.slime_rollout)
        if cfg.rollout.rollout_fn is not None:
            from rlrun.agent.slime_rollout import SlimeRolloutFn
            self.rollout_fn = SlimeRolloutFn(cfg.rollout.rollout_fn, cfg, self.prompts, router.url, model_dir)
        # data.rm_type=slime:<path> without a slime generate/rollout function: slime's reward through the adapter
        self.slime_reward = None
        if cfg.data.rm_type.startswith("slime:") and cfg.rollout.generate_fn is None and cfg.rollout.rollout_fn is None:
            from rlrun.agent.slime_rollout import SlimeRewardOnOwnGeneration
            self.slime_reward = SlimeRewardOnOwnGeneration(cfg, router.url, model_dir)
        self.reward_post_process = None  # algo.reward_post_process: slime's, on each rollout's trained samples
        if cfg.algo.reward_post_process is not None:
            from rlrun.agent.slime_rollout import SlimeRewardPostProcess
            self.reward_post_process = SlimeRewardPostProcess(cfg.algo.reward_post_process, cfg, router.url,
                                                              model_dir)

    @classmethod
    def start(cls, cfg, plan, placement, env, model_dir: str, tokenizer, run_dir: Path, stack,
              watch=None) -> "RolloutSide":
        """Engines (Ray actors) -> the router -> the engines registered and watched; each
        stopped by `stack` in reverse order. watch: raises to end the engines' start (the kind's start)."""
        start = resolve(ENGINES[cfg.rollout.engine].start)
        # a kind's start that takes no watch (a plugin written before it) starts as before: without one
        kw = {"watch": watch} if watch is not None and "watch" in inspect.signature(start).parameters else {}
        engines, restart = start(cfg, plan, placement, runtime_env(env), model_dir, str(Path(run_dir) / "logs"), **kw)
        router = run_router(cfg.rollout, Path(run_dir) / "logs")
        stack.callback(router.stop)
        router.start()
        group = EngineGroup(router, engines, restart, max_restarts=cfg.rollout.max_engine_restarts)
        stack.callback(group.stop)
        group.start()
        side = cls(cfg, tokenizer, run_dir, router, group, model_dir)
        side.placement = placement
        return side

    def generate(self, samples: list, sampling, seeds: list[int], evaluation: bool = False) -> tuple[list, dict]:
        """The generate function on every sample -> (samples, counters). evaluation: eval datasets
        (a slime function is told so, as slime does: its `for_evaluation` form)."""
        fn = getattr(self.generate_fn, "for_evaluation", self.generate_fn) if evaluation else self.generate_fn
        out, counts = generate_samples(self.router.url, self.cfg.rollout, samples, sampling, seeds, fn=fn,
                                       tokenizer=self.tokenizer, versions=self.versions,
                                       partial=self.cfg.rollout.partial_rollout, model_path=self.model_dir,
                                       routing_shape=None if evaluation else routing_shape(self.cfg),
                                       engine_urls=lambda: self.engines.urls)
        if self.slime_reward is not None:  # slime's generate_and_rm scores right after generating
            self.slime_reward(out)
        return out, counts

    @contextmanager
    def profiling(self, rollout_id: int):
        """debug.profile_engines: the engines' /start_profile ... /stop_profile around the generation
        of the rollouts in debug.profile_steps (SGLang writes RUN_DIR/profile/rollout_N/engines)."""
        d = self.cfg.debug
        if not (d.profile_engines and rollout_id in d.profile_steps):
            yield
            return
        out = trace_path(self.run_dir, rollout_id, 0).parent / "engines"
        cannot = self.engines.start_profile(str(out.resolve()))
        if cannot:
            print(f"[rlrun] debug.profile_engines: engines {cannot} have no profiler (rollout.engine="
                  f"{self.cfg.rollout.engine}); only engines with a profiler write traces", flush=True)
        try:
            yield
        finally:
            if len(cannot) < len(self.engines.urls):
                self.engines.stop_profile()

    def collect(self, rollout_id: int, sampling):
        """rollout_batch_size prompts x n samples, generated and scored -> (all samples, kept
        samples, metrics). With dynamic sampling, more rounds of over_sampling_batch_size prompts
        until rollout_batch_size groups carry signal (at most MAX_DRAWS rounds). Off the main
        thread (the async producer) it is the rollout part's phase for the stall watchdog (the sync
        loop times it as the driver's rollout phase)."""
        if threading.current_thread() is threading.main_thread():
            return self._post_processed(*self._collect(rollout_id, sampling))
        with BOARD.phase("rollout", "generate"):
            return self._post_processed(*self._collect(rollout_id, sampling))

    def _post_processed(self, samples: list, kept: list, info: dict):
        """algo.reward_post_process on the samples that train (slime calls it on the rollout's train data)."""
        if self.reward_post_process is not None and kept:
            self.reward_post_process(kept)
        return samples, kept, info

    def _collect(self, rollout_id: int, sampling):
        if self.rollout_fn is not None:
            return self._collect_with_rollout_fn(self.rollout_fn, rollout_id)
        r = self.cfg.rollout
        n = r.n_samples_per_prompt
        collector = GroupCollector(r.rollout_batch_size, keep=steps.group_filter(r.dynamic_sampling))
        per_round = r.rollout_batch_size if r.dynamic_sampling is None else r.over_sampling_batch_size
        samples: list = []
        info = {"rollout/retries": 0.0, "time/reward_s": 0.0}
        while not collector.done and collector.rounds < MAX_DRAWS:
            new = self._draw(collector.prompts_to_request(per_round), n, collector.generated)
            if self.source is not None:  # a data source's buffered groups, not generated again
                info["rollout/reused_samples"] = info.get("rollout/reused_samples", 0.0) + sum(
                    s.status is not Status.PENDING for s in new)
            if not new:
                raise RuntimeError(f"the prompt data ran out after {self.prompts.epoch} epochs (data.num_epochs="
                                   f"{self.cfg.data.num_epochs}); raise data.num_epochs or lower rollout.num_rollout")
            seeds = [steps.request_seed(self.cfg.run.seed, rollout_id, len(samples) + i) for i in range(len(new))]
            new, counts = self.generate(new, sampling, seeds)
            for k, v in counts.items():
                info[k] = info.get(k, 0.0) + v
            t0 = time.perf_counter()
            for k, v in steps.score(new, self.cfg.data.rm_type, n, self.cfg.data.rm_url, self.judge).items():
                info[k] = info.get(k, 0.0) + v
            info["time/reward_s"] += time.perf_counter() - t0
            samples += new
            collector.add(groups_of(new))
        info.update(collector.metrics())
        kept = [s for g in collector.kept[:r.rollout_batch_size] for s in g]
        if self.source is not None:  # groups that passed the filter but were not trained on (surplus)
            self.source.add_samples(collector.kept[r.rollout_batch_size:])
        return samples, kept, info

    def _collect_with_rollout_fn(self, fn: Callable[[int], list], rollout_id: int):
        """rollout.rollout_fn: slime's rollout function makes (and scores) the whole rollout; samples it left
        unscored get data.rm_type's reward."""
        t0 = time.perf_counter()
        samples = fn(rollout_id)
        info = {"rollout/retries": 0.0, "time/rollout_fn_s": time.perf_counter() - t0}
        if any(s.reward is None for s in samples):
            d, n = self.cfg.data, self.cfg.rollout.n_samples_per_prompt
            info.update(steps.score(samples, d.rm_type, n, self.cfg.data.rm_url, self.judge))
        return samples, samples, info

    def _draw(self, prompts: int, n: int, group_offset: int) -> list:
        """`prompts` groups of n fresh samples, from data.source when one is set."""
        if self.source is None:
            return steps.make_samples(self.prompts.next_batch(prompts), n, group_offset)
        return [s for g in self.source.sample(prompts) for s in g]
