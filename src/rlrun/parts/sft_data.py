"""The rollout side of a run whose loss trains on a dataset (algo.loss_type=sft_loss): each rollout step is
rollout.rollout_batch_size rows of data.prompt_data (or the toy task) as trained samples (rlrun.data.sft);
no engines, no router, no rewards. The sync loop drives it as it drives the engines' rollout side."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from rlrun.data.sft import sft_sample
from rlrun.parts.no_engines import NoEngines
from rlrun.parts.sampling import load_prompts
from rlrun.rollout.handle import PolicyVersion


class SftData:
    def __init__(self, cfg, tokenizer, run_dir: Path):
        self.cfg, self.tokenizer = cfg, tokenizer
        self.prompts = load_prompts(cfg, tokenizer, Path(run_dir))
        self.versions, self.engines = PolicyVersion(), NoEngines()  # the rollout seam's gate and fleet: idle

    def collect(self, rollout_id: int, sampling):
        """The next rollout_batch_size rows -> (samples, samples to train, metrics)."""
        items = self.prompts.next_batch(self.cfg.rollout.rollout_batch_size)
        if not items:
            raise RuntimeError(f"the SFT data ran out after {self.prompts.epoch} epochs (data.num_epochs="
                               f"{self.cfg.data.num_epochs}); raise data.num_epochs or lower rollout.num_rollout")
        samples = [sft_sample(item, self.tokenizer, group_id=i) for i, item in enumerate(items)]
        trained = sum(sum(s.loss_mask or ()) for s in samples)
        return samples, samples, {"sft/trained_tokens": float(trained)}

    @contextmanager
    def profiling(self, rollout_id: int):
        yield
