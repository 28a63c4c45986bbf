"""Save / restore: the trainer's state and the driver's (next rollout, data iterator, RNG).

checkpoint.async_save: the trainer snapshots its state into host memory and writes it on a background thread
(rlrun.train.async_save) while the next steps train; a commit thread here polls the ranks and, once every rank's
files are complete, writes driver.json and moves `latest` (rlrun.checkpoint), so `latest` only ever names a
complete checkpoint, as with a blocking save. The next save and latest() wait for the commit in flight."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from rlrun import checkpoint as ckpt

POLL_S = 0.5  # how often the commit thread asks the trainer ranks whether their background write is done


class Checkpoints:
    def __init__(self, cfg, run_dir: Path, trainer, tokenizer=None):
        self.cfg, self.trainer, self.tokenizer = cfg, trainer, tokenizer
        self.save_dir = Path(cfg.checkpoint.save or Path(run_dir) / "checkpoints")
        self._commit_thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def save(self, rollout_id: int, data_state: dict) -> None:
        """After rollout_id: trainer state, and the data iterator's state at the point the trainer
        consumed (`data_state`: what the next rollout draws from). With checkpoint.async_save it returns once the
        trainer's snapshot is taken; the files and the commit follow in the background."""
        self.wait()  # the previous save is committed first: checkpoints commit in order
        where = ckpt.iter_dir(self.save_dir, rollout_id + 1)
        state = ckpt.DriverState.capture(rollout_id + 1, data_state)  # the RNG as of this save point
        if self.cfg.checkpoint.async_save:
            self.trainer.save_async(str(ckpt.trainer_dir(where)))
        else:
            self.trainer.save(str(ckpt.trainer_dir(where)))
        hf_dir = ckpt.hf_model_dir(where)
        if self.tokenizer is not None and (hf_dir / "config.json").is_file():
            self.tokenizer.save_pretrained(hf_dir)  # an HF dir checkpoint.hf can start from (an SFT run's)
        if not self.cfg.checkpoint.async_save:
            self._commit(where, state)
            return
        self._commit_thread = threading.Thread(target=self._commit_when_written, args=(where, state), daemon=True,
                                               name=f"checkpoint-commit {where.name}")
        self._commit_thread.start()

    def _commit_when_written(self, where: Path, state: ckpt.DriverState) -> None:
        try:
            while not self.trainer.save_done():
                time.sleep(POLL_S)
            self._commit(where, state)
        except BaseException as e:  # noqa: BLE001 - raised by the next save or latest()
            self._error = e
            print(f"[rlrun] checkpoint {where} was not committed: {e!r}", flush=True)

    def _commit(self, where: Path, state: ckpt.DriverState) -> None:
        ckpt.write_driver_state(where, state)
        ckpt.mark_latest(self.save_dir, where)
        if keep := self.cfg.checkpoint.keep_last:
            for gone in ckpt.prune(self.save_dir, keep):
                print(f"[rlrun] removed {gone} (checkpoint.keep_last={keep})", flush=True)

    def wait(self) -> None:
        """Blocks until the save in flight is committed; raises when its write or commit failed."""
        if self._commit_thread is not None:
            self._commit_thread.join()
            self._commit_thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"an asynchronous checkpoint save failed (checkpoint.async_save): {error!r}") \
                from error

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
        """The newest complete checkpoint (after the save in flight is committed)."""
        self.wait()
        return str(ckpt.find_latest(self.save_dir) or "")
