"""Save / restore: the trainer's state and the driver's (next rollout, data iterator, RNG)."""
from __future__ import annotations

from pathlib import Path

from rlrun import checkpoint as ckpt


class Checkpoints:
    def __init__(self, cfg, run_dir: Path, trainer, tokenizer=None):
        self.cfg, self.trainer, self.tokenizer = cfg, trainer, tokenizer
        self.save_dir = Path(cfg.checkpoint.save or Path(run_dir) / "checkpoints")

    def save(self, rollout_id: int, data_state: dict) -> None:
        """After rollout_id: trainer state, and the data iterator's state at the point the trainer
        consumed (`data_state`: what the next rollout draws from)."""
        where = ckpt.iter_dir(self.save_dir, rollout_id + 1)
        self.trainer.save(str(ckpt.trainer_dir(where)))
        hf_dir = ckpt.hf_model_dir(where)
        if self.tokenizer is not None and (hf_dir / "config.json").is_file():
            self.tokenizer.save_pretrained(hf_dir)  # an HF dir checkpoint.hf can start from (an SFT run's)
        ckpt.write_driver_state(where, ckpt.DriverState.capture(rollout_id + 1, data_state))
        ckpt.mark_latest(self.save_dir, where)
        if keep := self.cfg.checkpoint.keep_last:
            for gone in ckpt.prune(self.save_dir, keep):
                print(f"[rlrun] removed {gone} (checkpoint.keep_last={keep})", flush=True)

    def restore(self):
        """Loads the newest checkpoint into the trainer (and the RNG) when resuming; returns its
        DriverState, or None for a fresh start."""
        source = self.cfg.checkpoint.load or (self.save_dir if self.cfg.run.resume != "never" else None)
        found = ckpt.find_latest(source) if source else None
        if found is None and (self.cfg.run.resume == "must" or self.cfg.checkpoint.load):
            raise FileNotFoundError(f"no complete checkpoint under {source} (looked for {source}/{ckpt.LATEST}); "
                                    f"fix checkpoint.load or use run.resume=auto to start fresh")
        if found is None:
            return None
        self.trainer.load(str(ckpt.trainer_dir(found)))
        state = ckpt.read_driver_state(found)
        state.restore_rng()
        print(f"[rlrun] resumed from {found} at rollout {state.next_rollout}", flush=True)
        return state

    def latest(self) -> str:
        return str(ckpt.find_latest(self.save_dir) or "")
