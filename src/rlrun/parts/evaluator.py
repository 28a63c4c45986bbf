"""eval.datasets through the rollout side, on eval.interval."""
from __future__ import annotations

import statistics

from rlrun.parts import sampling as steps


class Evaluator:
    def __init__(self, cfg, rollout):
        self.cfg, self.rollout = cfg, rollout
        self._sets: dict[str, list] = {}

    def evaluate(self, rollout_id: int) -> dict[str, float]:
        from rlrun.rollout.client import Sampling

        e = self.cfg.eval
        sampling = Sampling(max_new_tokens=e.max_response_len, temperature=e.temperature, top_p=e.top_p,
                            top_k=e.top_k, stop=tuple(self.cfg.rollout.stop or ()),
                            stop_token_ids=tuple(self.cfg.rollout.stop_token_ids or ()))
        out: dict[str, float] = {}
        for ds in e.datasets:
            if ds.name not in self._sets:
                self._sets[ds.name] = steps.load_prompts(self.cfg, self.rollout.tokenizer, self.rollout.run_dir,
                                                         path=ds.path, train=False).items
            samples = steps.make_samples(self._sets[ds.name], e.n_samples_per_prompt, 0)
            seeds = [steps.request_seed(self.cfg.run.seed + 1, rollout_id, i) for i in range(len(samples))]
            samples, _ = self.rollout.generate(samples, sampling, seeds, evaluation=True)
            steps.score(samples, ds.rm_type, e.n_samples_per_prompt, self.cfg.data.rm_url,
                        getattr(self.rollout, "judge", None))
            out.update(steps.rollout_metrics(samples, prefix=f"eval/{ds.name}"))
        if out:
            out["eval/reward_mean"] = statistics.fmean(v for k, v in out.items() if k.endswith("/reward_mean"))
        return out
