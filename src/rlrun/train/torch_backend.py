"""The `torch` trainer backend: a transformers causal LM, data-parallel over Ray actors.

Each rank holds a full replica (plain DP: gloo on the CPU, nccl on GPUs). Samples of a rank are
packed into rows of at most max_tokens_per_gpu tokens (position ids restart per sample, so
transformers builds a block-diagonal causal mask) or grouped micro_batch_size at a time. The loss
of every micro-batch is divided by the *global* sample (or token) count, so summing gradients
over micro-batches and ranks gives exactly the gradient of the global-batch mean: DP over N ranks
is the same update as one rank on the whole batch.
"""
from __future__ import annotations

import os
import socket
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from rlrun.algo import AlgoParams, compute_loss, entropy_from_logits
from rlrun.algo.kl import kl as kl_estimate
from rlrun.rollout.weights import load_hf_dir
from rlrun.train.base import TrainBatch, TrainerBackend
from rlrun.train.hf_model import build_causal_lm
from rlrun.train.schedule import lr_at

_STATE_FILE = "trainer_state.pt"
_MODEL_DIR = "model"


class TorchBackend(TrainerBackend):
    sync_is_collective = False  # every rank holds the full replica: rank 0 alone exports weights

    def __init__(self, cfg, *, rank: int, world_size: int, gpu_id: int | None, total_steps: int):
        self.cfg, self.rank, self.world = cfg, rank, world_size
        self.total_steps = total_steps
        self.device = torch.device("cpu") if gpu_id is None else torch.device("cuda", gpu_id)
        # bf16 autocast on GPUs keeps fp32 master weights for AdamW; the CPU runs plain fp32.
        self.autocast = self.device.type == "cuda"
        self.params = AlgoParams.from_config(cfg)
        self.needs_ref = cfg.algo.use_kl_loss or cfg.algo.kl_coef != 0
        self.step = 0

    # -- setup ------------------------------------------------------------------------------
    @staticmethod
    def master_address() -> tuple[str, int]:
        """Address for the process group, taken by rank 0 on its own node."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            return ray.util.get_node_ip_address(), s.getsockname()[1]

    def init(self, master_addr: str = "127.0.0.1", master_port: int = 0) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if self.world > 1:
            dist.init_process_group(
                "nccl" if self.device.type == "cuda" else "gloo", init_method=f"tcp://{master_addr}:{master_port}",
                rank=self.rank, world_size=self.world, timeout=timedelta(minutes=10))
        ck = self.cfg.checkpoint
        self.model = build_causal_lm(self.cfg.model, ck.hf, self.cfg.run.seed).to(self.device)
        self.model.config.use_cache = False
        if self.cfg.train.recompute.granularity is not None:
            # transformers recomputes whole decoder layers: the closest to Megatron's full/selective.
            # (activation_checkpointing_enable is the newer name; older transformers lack it.)
            enable = getattr(self.model, "activation_checkpointing_enable", None)
            if enable is not None:
                enable({"use_reentrant": False})
            else:
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.ref = None
        if self.needs_ref:  # the reference policy: checkpoint.ref, else the initial weights
            self.ref = build_causal_lm(self.cfg.model, ck.ref or ck.hf, self.cfg.run.seed).to(self.device).eval()
            self.ref.requires_grad_(False)
        o = self.cfg.optim
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=o.lr, betas=(o.adam_beta1, o.adam_beta2),
                                     eps=o.adam_eps, weight_decay=o.weight_decay)

    # -- forward ----------------------------------------------------------------------------
    def _micro_batches(self, batch: TrainBatch, max_tokens: int) -> list[list[int]]:
        """Sample indices per micro-batch: greedy token packing, or micro_batch_size samples."""
        if not self.cfg.train.use_dynamic_batch_size:
            mbs = self.cfg.train.micro_batch_size
            return [list(range(i, min(i + mbs, len(batch)))) for i in range(0, len(batch), mbs)]
        groups: list[list[int]] = []
        used = 0
        for i, t in enumerate(batch.tokens):
            n = int(t.numel())
            if n > max_tokens:
                raise ValueError(f"sample {i} has {n} tokens > train.max_tokens_per_gpu={max_tokens}; raise it "
                                 f"to at least data.max_prompt_len + rollout.max_response_len")
            if not groups or used + n > max_tokens:
                groups.append([])
                used = 0
            groups[-1].append(i)
            used += n
        return groups

    def _forward(self, model, batch: TrainBatch, idx: list[int], entropy_grad: bool):
        """Packed forward of samples `idx` -> (response log-probs, entropy, response cu_seqlens)."""
        seqs = [batch.tokens[i] for i in idx]
        ids = torch.cat(seqs).to(self.device)[None]
        pos = torch.cat([torch.arange(int(s.numel())) for s in seqs]).to(self.device)[None]
        # logits at position t predict token t+1: take positions [start-1, len-1) of every sample.
        gather, offset, cu = [], 0, [0]
        for i, s in zip(idx, seqs):
            n = int(s.numel())
            gather.append(torch.arange(offset + batch.response_start[i] - 1, offset + n - 1))
            offset += n
            cu.append(cu[-1] + n - batch.response_start[i])
        gather = torch.cat(gather).to(self.device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits[0]
        logits = logits[gather].float()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, gather + 1][:, None])[:, 0]
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
        return logp, entropy, torch.tensor(cu, device=self.device)

    def _cat(self, xs: list[torch.Tensor] | None, idx: list[int]) -> torch.Tensor | None:
        return None if xs is None else torch.cat([xs[i] for i in idx]).to(self.device, torch.float32)

    @torch.no_grad()
    def compute_log_probs(self, batch: TrainBatch, which: str = "actor") -> list[torch.Tensor]:
        if which not in ("actor", "ref"):
            raise ValueError(f"which={which!r}: use 'actor' or 'ref'")
        model = self.model if which == "actor" else self.ref
        if model is None:
            raise RuntimeError("no reference model: it is built only when algo.use_kl_loss or algo.kl_coef != 0")
        model.eval()
        out: list[torch.Tensor] = [torch.empty(0)] * len(batch)
        for idx in self._micro_batches(batch, self.cfg.train.log_probs_max_tokens_per_gpu):
            logp, _, cu = self._forward(model, batch, idx, entropy_grad=False)
            for k, i in enumerate(idx):
                out[i] = logp[cu[k]:cu[k + 1]].cpu()
        return out

    # -- training ---------------------------------------------------------------------------
    def _all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            dist.all_reduce(t)
        return t

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        if batch.advantages is None:
            raise ValueError("train_step needs batch.advantages (computed by the loop from the rewards)")
        self.model.train()
        per_token = self.cfg.train.calculate_per_token_loss
        local = sum(float(m.sum()) for m in batch.loss_mask) if per_token else float(len(batch))
        normalizer = self._all_reduce(torch.tensor([local], dtype=torch.float64, device=self.device)).item()
        sums: dict[str, float] = {}
        # token sums for metrics that are means over all loss tokens: entropy, mismatch, KL
        tok = torch.zeros(5, dtype=torch.float64, device=self.device)
        for idx in self._micro_batches(batch, self.cfg.train.max_tokens_per_gpu):
            logp, entropy, cu = self._forward(self.model, batch, idx, entropy_grad=self.params.entropy_coef != 0)
            mask, ref = self._cat(batch.loss_mask, idx), self._cat(batch.ref_logp, idx)
            rollout = self._cat(batch.rollout_logp, idx)
            loss, m = compute_loss(logp, self._cat(batch.old_logp, idx), ref, rollout, self._cat(batch.advantages, idx),
                                   mask, entropy, self.params, cu_seqlens=cu, normalizer=normalizer)
            loss.backward()
            for k, v in m.items():
                sums[k] = sums.get(k, 0.0) + v
            d = logp.detach()
            tok[0] += mask.sum()
            tok[1] += (entropy.detach() * mask).sum()
            if rollout is not None:
                tok[2] += ((d - rollout).abs() * mask).sum()
            if ref is not None:
                tok[3] += (kl_estimate(d, ref, "low_var_kl") * mask).sum()
            tok[4] += float(cu[-1])
        grad_norm = self._reduce_grads_and_clip()
        lr = lr_at(self.step, lr=self.cfg.optim.lr, min_lr=self.cfg.optim.min_lr, style=self.cfg.optim.lr_decay_style,
                   warmup=self.cfg.optim.lr_warmup_iters, total=self.total_steps)
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.step += 1
        keys = sorted(sums)
        red = self._all_reduce(torch.tensor([sums[k] for k in keys], dtype=torch.float64, device=self.device))
        metrics = {f"train/{k}": float(v) for k, v in zip(keys, red.tolist())}
        tok = self._all_reduce(tok).tolist()
        n_tok = max(tok[0], 1.0)
        metrics.update({"train/entropy": tok[1] / n_tok, "train/grad_norm": grad_norm, "train/lr": lr,
                        "train/response_tokens": tok[4]})
        if batch.rollout_logp is not None:
            metrics["train/train_rollout_logp_abs_diff"] = tok[2] / n_tok
        if batch.ref_logp is not None:
            metrics["train/kl"] = tok[3] / n_tok
        return metrics

    def _reduce_grads_and_clip(self) -> float:
        """Sum gradients over ranks (one flat buffer: one collective), then clip by global norm."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:  # a parameter unused by this shard (e.g. an MoE expert)
                p.grad = torch.zeros_like(p)
        if self.world > 1:
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat)
            offset = 0
            for p in params:
                n = p.grad.numel()
                p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
                offset += n
        clip = self.cfg.optim.clip_grad
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip and clip > 0 else float("inf"))
        return float(norm)

    # -- weights and checkpoints ------------------------------------------------------------
    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def save(self, path: str) -> None:
        out = Path(path)
        if self.rank == 0:  # ranks hold identical replicas: one writer
            out.mkdir(parents=True, exist_ok=True)
            self.model.save_pretrained(out / _MODEL_DIR)
            torch.save({"optimizer": self.opt.state_dict(), "step": self.step}, out / _STATE_FILE)
        if self.world > 1:
            dist.barrier()

    def load(self, path: str) -> None:
        src = Path(path)
        weights = dict(load_hf_dir(src / _MODEL_DIR))  # one file or save_pretrained's shards
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        tied = {"lm_head.weight"} if self.model.config.tie_word_embeddings else set()
        if set(missing) - tied or unexpected:
            raise RuntimeError(f"{src / _MODEL_DIR}: checkpoint does not match model.* (missing {missing}, "
                               f"unexpected {unexpected}); resume with the config the run was started with")
        state = torch.load(src / _STATE_FILE, map_location=self.device, weights_only=False)
        self.opt.load_state_dict(state["optimizer"])
        self.step = int(state["step"])

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def set_cpu_threads() -> None:
    """Honour OMP_NUM_THREADS from hardware.env in actors (torch reads it only at import)."""
    n = os.environ.get("OMP_NUM_THREADS")
    if n:
        torch.set_num_threads(int(n))
