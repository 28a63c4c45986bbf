"""The trainer backend interface and the batch it consumes.

A backend is one data-parallel rank (a Ray actor). The driver hands every rank its shard of the
batch; ranks talk to each other only through torch.distributed. The torch backend implements this
for CPU and single-host GPU runs; the Megatron backend implements the same calls (without
the PPO critic's compute_values).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, fields, replace
from typing import Iterator

import torch

from rlrun.rollout.weights import buckets
from rlrun.train.async_save import BackgroundWriter


@dataclass
class TrainBatch:
    """Samples for the trainer, one entry per sample (1-D tensors; response-token aligned).

    tokens: prompt + response ids. response_start: index of the first response token in tokens.
    loss_mask, advantages, old_logp, ref_logp, rollout_logp: one value per response token;
    None where not (yet) computed. values, returns (PPO only): the critic's values that GAE used
    and the value targets; a train_step batch with `returns` also trains the critic.
    offpolicy_mask: optional per response token, 1 = keep (rollout.mask_offpolicy_in_partial_rollout
    fills it): applied like the loss mask, everywhere (TrainBatch.trained_mask).
    routed_experts: optional (rollout.routing_replay) per sample, int32 [rows, num_layers, top_k]: the experts
    the engine routed each position of `tokens` to (rows = len(tokens) - 1: the last token has none; the
    trainer routes positions without a row itself); the actor's forwards replay them.
    """

    tokens: list[torch.Tensor]
    response_start: list[int]
    loss_mask: list[torch.Tensor]
    advantages: list[torch.Tensor] | None = None
    old_logp: list[torch.Tensor] | None = None
    ref_logp: list[torch.Tensor] | None = None
    rollout_logp: list[torch.Tensor] | None = None
    values: list[torch.Tensor] | None = None
    returns: list[torch.Tensor] | None = None
    offpolicy_mask: list[torch.Tensor] | None = None
    routed_experts: list[torch.Tensor] | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def select(self, index: list[int] | range) -> TrainBatch:
        """The samples at `index`, in that order."""
        pick = lambda xs: None if xs is None else [xs[i] for i in index]  # noqa: E731
        return TrainBatch(**{f.name: pick(getattr(self, f.name)) for f in fields(self)})

    def shard(self, rank: int, world: int) -> TrainBatch:
        """Contiguous shard of DP rank `rank`; sizes differ by at most one sample."""
        n = len(self)
        start, stop = rank * n // world, (rank + 1) * n // world
        return self.select(range(start, stop))

    @property
    def trained_mask(self) -> list[torch.Tensor]:
        """Per sample, the response tokens that train: loss_mask times offpolicy_mask (when set)."""
        if self.offpolicy_mask is None:
            return self.loss_mask
        return [m * o.to(m.dtype) for m, o in zip(self.loss_mask, self.offpolicy_mask)]

    def fold_offpolicy_mask(self) -> tuple[TrainBatch, float | None]:
        """(this batch with offpolicy_mask folded into loss_mask, loss tokens the fold removed; None
        without an offpolicy_mask): what a trainer does first, so every mask use sees one mask."""
        if self.offpolicy_mask is None:
            return self, None
        trained = self.trained_mask
        removed = sum(float(m.sum() - t.sum()) for m, t in zip(self.loss_mask, trained))
        return replace(self, loss_mask=trained, offpolicy_mask=None), removed

    def with_(self, **kw) -> TrainBatch:
        return replace(self, **kw)

    @property
    def num_tokens(self) -> int:
        return sum(int(t.numel()) for t in self.tokens)


class TrainerBackend(abc.ABC):
    """One DP rank of a trainer. Every call is collective: all ranks call it with their shard.

    The one trainer contract: rlrun.launch.train_group.TrainGroup runs these methods on every rank (it forwards
    each by this class's own method, so a renamed one fails there), and the loops see the group through
    rlrun.parts.seams.TrainerPart, which is this contract lifted to the group."""
    sync_is_collective = True  # state_dict_for_sync needs every rank (a TP gather); False: rank 0 alone exports

    @staticmethod
    def master_address() -> tuple[str, int]:
        """Address for the process group, taken by rank 0 on its own node (a port leased as the engines' are: they
        may pick theirs on this node while the ranks build)."""
        import ray

        from rlrun.rollout.process import free_port

        return ray.util.get_node_ip_address(), free_port("")

    @abc.abstractmethod
    def init(self, master_addr: str = "127.0.0.1", master_port: int = 0) -> None:
        """Build the model(s), optimizer and the process group (rank 0's master_address())."""

    @abc.abstractmethod
    def compute_log_probs(self, batch: TrainBatch, which: str = "actor") -> list[torch.Tensor]:
        """Log-probs of the response tokens under the current ('actor') or reference ('ref') policy."""

    def compute_values(self, batch: TrainBatch) -> list[torch.Tensor]:
        """Critic values of the response tokens (PPO: algo.advantage_estimator=ppo builds a critic)."""
        raise NotImplementedError(f"{type(self).__name__} has no critic; algo.advantage_estimator=ppo needs "
                                  f"train.backend=torch")

    @abc.abstractmethod
    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimizer step on this rank's shard of one global batch; metrics are global means.
        With `batch.returns` the critic takes one step too (metrics critic/*)."""

    def offload(self) -> None:
        """train.offload: parameters, gradients and optimizer state to host memory, freeing the
        device for colocated rollout engines. Idempotent."""
        raise NotImplementedError(f"{type(self).__name__} cannot offload; set train.offload=false")

    def onload(self) -> None:
        """Back to the device after `offload` (a no-op when nothing is offloaded). Every call that
        computes (compute_log_probs, compute_values, train_step) onloads first by itself."""
        raise NotImplementedError(f"{type(self).__name__} cannot offload; set train.offload=false")

    @abc.abstractmethod
    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        """Full weights with Hugging Face names, on the CPU, for the rollout engines."""

    def sync_buckets(self, bucket_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
        """The same weights for a push, in buckets of about bucket_bytes, each made when it is asked for (a backend
        that can: on its device, so the state never makes a round trip through host memory). A collective where
        state_dict_for_sync is one: every sync rank iterates it to the end. This default buckets state_dict_for_sync."""
        yield from buckets(list(self.state_dict_for_sync().items()), bucket_bytes)

    @abc.abstractmethod
    def save(self, path: str) -> None:
        """Write model, optimizer and scheduler state under directory `path`."""

    @abc.abstractmethod
    def load(self, path: str) -> None:
        """Restore what `save` wrote."""

    def save_async(self, path: str) -> None:
        """checkpoint.async_save: what `save` writes, snapshot into host memory now and written by a background
        thread (rlrun.train.async_save) while training goes on; save_done() says when the files are complete.
        This default saves synchronously."""
        self.save(path)

    def save_done(self) -> bool:
        """Whether the latest save_async's files are complete (raises the background write's error)."""
        return self.checkpoint_writer.done()

    def wait_save(self) -> None:
        """Blocks until the latest save_async's files are complete (raises the background write's error)."""
        self.checkpoint_writer.wait()

    @property
    def checkpoint_writer(self) -> BackgroundWriter:
        writer = self.__dict__.get("_checkpoint_writer")
        if writer is None:
            writer = self.__dict__["_checkpoint_writer"] = BackgroundWriter(
                f"checkpoint-writer rank {getattr(self, 'rank', 0)}")
        return writer
