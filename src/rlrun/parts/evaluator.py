"""eval.datasets through the rollout side, on eval.interval."""
from __future__ import annotations

import statistics

from rlrun.parts import sampling as steps


class Evaluator:
    def __init__(self, cfg, rollout):
        self.cfg, self.rollout = cfg, rollout
        self._sets: dict[str, list] = {}

    def evaluate(self, rollout_id: int) -> dict[str, float]:
        e = self.cfg.eval
        out: dict[str, float] = {}
        for ds in e.datasets:
            sampling = dataset_sampling(self.cfg, ds)
            n = ds.n_samples_per_prompt or e.n_samples_per_prompt
            if ds.name not in self._sets:
                self._sets[ds.name] = steps.load_prompts(self.cfg, self.rollout.tokenizer, self.rollout.run_dir,
                                                         path=ds.path, train=False).items
            samples = steps.make_samples(self._sets[ds.name], n, 0)
            seeds = [steps.request_seed(self.cfg.run.seed + 1, rollout_id, i) for i in range(len(samples))]
            samples, _ = self.rollout.generate(samples, sampling, seeds, evaluation=True)
            steps.score(samples, ds.rm_type, n, self.cfg.data.rm_url, getattr(self.rollout, "judge", None))
            out.update(steps.rollout_metrics(samples, prefix=f"eval/{ds.name}"))
        if out:
            out["eval/reward_mean"] = statistics.fmean(v for k, v in out.items() if k.endswith("/reward_mean"))
        return out


def dataset_sampling(cfg, ds):
    """The engine request's sampling for one eval dataset: its own values (slime's --eval-config per-dataset keys,
    rlrun.config.derive fills the rest from the eval section), the rollout's stop strings and ids."""
    from rlrun.rollout.client import Sampling

    e = cfg.eval
    pick = lambda key: getattr(ds, key) if getattr(ds, key) is not None else getattr(e, key)  # noqa: E731
    return Sampling(max_new_tokens=pick("max_response_len"), temperature=pick("temperature"), top_p=pick("top_p"),
                    top_k=pick("top_k"), stop=tuple(cfg.rollout.stop or ()),
                    stop_token_ids=tuple(cfg.rollout.stop_token_ids or ()))
