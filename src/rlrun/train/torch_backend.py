"""The `torch` trainer backend: a transformers causal LM, data-parallel over Ray actors.

Each rank holds a full replica (plain DP: gloo on the CPU, nccl on GPUs). Samples of a rank are
packed into rows of at most max_tokens_per_gpu tokens (position ids restart per sample, so
transformers builds a block-diagonal causal mask) or grouped micro_batch_size at a time. The loss
of every micro-batch is divided by the *global* sample (or token) count, so summing gradients
over micro-batches and ranks gives exactly the gradient of the global-batch mean: DP over N ranks
is the same update as one rank on the whole batch.

With algo.advantage_estimator=ppo a critic (rlrun/train/critic.py) lives on the same device with
its own AdamW: `compute_values` gives the values GAE needs, and a train_step whose batch carries
`returns` also takes one critic step on the clipped value loss, normalised and all-reduced the
same way as the policy loss.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from rlrun.algo import AlgoParams, aggregate, compute_loss, value_loss
from rlrun.algo.token_stats import entropy as token_entropy, logp_and_entropy
from rlrun.config.kinds import trainer_teacher, use_critic
from rlrun.rollout.routing import RoutingReplay, packed_ids
from rlrun.rollout.weights import load_hf_dir
from rlrun.train.base import TrainBatch, TrainerBackend
from rlrun.train.batching import loss_normalizer, micro_batches, to_device
from rlrun.train import lora, offload as off
from rlrun.train.async_save import host_copy
from rlrun.train.critic import build_value_model
from rlrun.train.dist import all_reduce_sum, barrier, join_process_group
from rlrun.train.hf_model import build_causal_lm
from rlrun.train.schedule import lr_at, warmup_iters
from rlrun.train.step_metrics import StepSums, mismatch_sum, policy_metrics

_STATE_FILE = "trainer_state.pt"
_MODEL_DIR = "model"
_CRITIC_FILE = "critic.safetensors"


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
        self.needs_critic = use_critic(cfg)
        self.needs_teacher = trainer_teacher(cfg)
        self.step = 0
        self.offloaded = False  # train.offload: state in host memory between train phases
        self.host_cache = off.HostCache()  # pinned host buffers the offloads reuse

    # -- setup ------------------------------------------------------------------------------
    def init(self, master_addr: str = "127.0.0.1", master_port: int = 0) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if self.world > 1:
            join_process_group(master_addr, master_port, self.rank, self.world, self.device)
        ck = self.cfg.checkpoint
        self.model = build_causal_lm(self.cfg.model, ck.hf, self.cfg.run.seed).to(self.device)
        self.model.config.use_cache = False
        if self.cfg.model.lora.rank:  # LoRA: the base frozen, the adapter trains (rlrun.train.lora)
            self.model = lora.wrap(self.model, self.cfg.model.lora)
        self._recompute(self.model)
        # rollout.routing_replay: the actor's MoE routers take the engines' expert choices (the reference and
        # the teacher route themselves, as slime's "fallthrough")
        self.replay = RoutingReplay(self.model) if self.cfg.rollout.routing_replay else None
        self.ref = None
        if self.needs_ref:  # the reference policy: checkpoint.ref, else the initial weights
            from rlrun.config.torch_dist import ref_weights

            ref_dir, note = ref_weights(ck.ref, ck.hf)
            if note:
                import logging
                logging.getLogger(__name__).warning(note)  # said once, when the reference model is built
            self.ref = build_causal_lm(self.cfg.model, ref_dir, self.cfg.run.seed).to(self.device).eval()
            self.ref.requires_grad_(False)
        self.teacher = None
        if self.needs_teacher:  # on-policy distillation: the teacher's forward on the student's samples
            self.teacher = build_causal_lm(self.cfg.model, self.cfg.algo.distill.teacher, self.cfg.run.seed)
            self.teacher = self.teacher.to(self.device).eval()
            self.teacher.requires_grad_(False)
        self.opt = self._adamw(self.model)
        self.critic = self.critic_opt = None
        if self.needs_critic:  # PPO: the critic shares the actor's device (slime's layout)
            self.critic = build_value_model(self.cfg.model, ck.hf, self.cfg.run.seed).to(self.device)
            self._recompute(self.critic.backbone)
            self.critic_opt = self._adamw(self.critic)  # lr set per step from optim.critic_lr

    def _recompute(self, model) -> None:
        if self.cfg.train.recompute.granularity is not None:
            # transformers recomputes whole decoder layers: the closest to Megatron's full/selective.
            # (activation_checkpointing_enable is the newer name; older transformers lack it.)
            enable = getattr(model, "activation_checkpointing_enable", None)
            if enable is not None:
                enable({"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def _adamw(self, model) -> torch.optim.AdamW:
        o = self.cfg.optim
        return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=o.lr, betas=(o.adam_beta1, o.adam_beta2),
                                 eps=o.adam_eps, weight_decay=o.weight_decay)

    # -- offload ----------------------------------------------------------------------------
    def _state(self):
        """(modules, optimizers) that offload moves: actor, reference, critic and their AdamWs."""
        modules = [m for m in (self.model, self.ref, self.teacher, self.critic) if m is not None]
        return modules, [o for o in (self.opt, self.critic_opt) if o is not None]

    def _move(self, device: torch.device) -> None:
        modules, optimizers = self._state()
        for m in modules:
            off.move_module(m, device, self.host_cache)
        for o in optimizers:
            off.move_optimizer(o, device, cache=self.host_cache)

    def offload(self) -> None:
        if not self.offloaded:
            self._move(off.HOST)
            self.offloaded = True
            off.free_device_cache(self.device)

    def onload(self) -> None:
        if self.offloaded:
            self._move(self.device)
            self.offloaded = False

    # -- forward ----------------------------------------------------------------------------
    def _micro_batches(self, batch: TrainBatch, max_tokens: int) -> list[list[int]]:
        return micro_batches(self.cfg.train, [int(t.numel()) for t in batch.tokens], max_tokens)

    def _pack(self, batch: TrainBatch, idx: list[int]):
        """Samples `idx` as one row -> (ids, position ids, response positions, response cu_seqlens)."""
        seqs = [batch.tokens[i] for i in idx]
        ids = to_device(torch.cat(seqs), self.device)[None]
        pos = to_device(torch.cat([torch.arange(int(s.numel())) for s in seqs]), self.device)[None]
        # the output at position t predicts token t+1: take positions [start-1, len-1) of every sample.
        gather, offset = [], 0
        for i, s in zip(idx, seqs):
            n = int(s.numel())
            gather.append(torch.arange(offset + batch.response_start[i] - 1, offset + n - 1))
            offset += n
        cu = to_device(torch.tensor(self._response_cu(batch, idx)), self.device)
        return ids, pos, to_device(torch.cat(gather), self.device), cu

    @staticmethod
    def _response_cu(batch: TrainBatch, idx: list[int]) -> list[int]:
        """cu_seqlens over the response tokens of samples `idx` (host side: reading it needs no sync)."""
        cu = [0]
        for i in idx:
            cu.append(cu[-1] + int(batch.tokens[i].numel()) - batch.response_start[i])
        return cu

    def _route(self, model, batch: TrainBatch | None, idx: list[int]) -> None:
        """Routing replay for the next forward of `model` on samples `idx` (batch None: the model routes
        itself). The ids stay set through the backward: recomputed layers route the same way."""
        if self.replay is None or model is not self.model:
            return
        if batch is None or batch.routed_experts is None:
            self.replay.ids = None
            return
        self.replay.ids = to_device(packed_ids([batch.routed_experts[i] for i in idx],
                                               [int(batch.tokens[i].numel()) for i in idx],
                                               self.replay.num_layers, self.replay.top_k), self.device)

    def _forward(self, model, batch: TrainBatch, idx: list[int], entropy_grad: bool, replay: bool = True):
        """Packed forward of samples `idx` -> (response log-probs, entropy, response cu_seqlens).
        replay=False: the actor routes itself even when the batch carries routed experts."""
        self._route(model, batch if replay else None, idx)
        ids, pos, gather, cu = self._pack(batch, idx)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits[0]
        rows, targets = logits[gather], ids[0, gather + 1]
        if entropy_grad and torch.is_grad_enabled():  # an entropy term in the loss
            return (*logp_and_entropy(rows, targets), cu)
        logp = torch.log_softmax(rows.float(), dim=-1).gather(-1, targets[:, None])[:, 0]
        return logp, token_entropy(rows), cu

    def _values(self, batch: TrainBatch, idx: list[int]):
        """Critic values of the response tokens of samples `idx` -> (values, response cu_seqlens)."""
        ids, pos, gather, cu = self._pack(batch, idx)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            values = self.critic(ids, pos)[0]
        return values[gather].float(), cu

    def _cat(self, xs: list[torch.Tensor] | None, idx: list[int]) -> torch.Tensor | None:
        return None if xs is None else to_device(torch.cat([xs[i] for i in idx]), self.device, torch.float32)

    @torch.no_grad()
    def compute_log_probs(self, batch: TrainBatch, which: str = "actor") -> list[torch.Tensor]:
        models = {"actor": self.model, "ref": self.ref, "teacher": self.teacher}
        if which not in models:
            raise ValueError(f"which={which!r}: use 'actor', 'ref' or 'teacher'")
        self.onload()
        model = models[which]
        if model is None:
            raise RuntimeError("no reference model: it is built only when algo.use_kl_loss or algo.kl_coef != 0"
                               if which == "ref" else "no teacher: it is built only when algo.distill.teacher is set")
        model.eval()

        try:
            return self._per_sample(batch, lambda idx: self._forward(model, batch, idx, entropy_grad=False)[0])
        finally:
            self._route(model, None, [])

    @torch.no_grad()
    def compute_values(self, batch: TrainBatch) -> list[torch.Tensor]:
        if self.critic is None:
            raise RuntimeError("no critic: it is built only with algo.advantage_estimator=ppo")
        self.onload()
        self.critic.eval()
        return self._per_sample(batch, lambda idx: self._values(batch, idx)[0])

    def _per_sample(self, batch: TrainBatch, forward) -> list[torch.Tensor]:
        """`forward(idx) -> response values` (flat, sample after sample) per inference micro-batch,
        split back into one CPU tensor per sample."""
        out: list[torch.Tensor] = [torch.empty(0)] * len(batch)
        for idx in self._micro_batches(batch, self.cfg.train.log_probs_max_tokens_per_gpu):
            flat, cu = forward(idx), self._response_cu(batch, idx)
            for k, i in enumerate(idx):
                out[i] = flat[cu[k]:cu[k + 1]].cpu()
        return out

    # -- training ---------------------------------------------------------------------------
    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        if batch.advantages is None:
            raise ValueError("train_step needs batch.advantages (computed by the loop from the rewards)")
        self.onload()
        batch, offpolicy_masked = batch.fold_offpolicy_mask()
        normalizer = loss_normalizer(batch.loss_mask, self.cfg.train.calculate_per_token_loss, self.device)
        # the critic first: its step reads self.step before the actor's step advances it
        critic = self._critic_step(batch, normalizer) if batch.returns is not None else {}
        return {**self._actor_step(batch, normalizer, offpolicy_masked), **critic}

    def _lr(self, base: float) -> float:
        o = self.cfg.optim
        return lr_at(self.step, lr=base, min_lr=o.min_lr, style=o.lr_decay_style,
                     warmup=warmup_iters(o, self.total_steps), total=self.total_steps)

    def _optimizer_step(self, model, opt, base_lr: float) -> tuple[float, float]:
        """Sum grads over ranks, clip, step at the scheduled lr -> (grad norm, lr)."""
        grad_norm = self._reduce_grads_and_clip(model)
        lr = self._lr(base_lr)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        opt.zero_grad(set_to_none=True)
        return grad_norm, lr

    def _actor_step(self, batch: TrainBatch, normalizer: float, offpolicy_masked: float | None) -> dict[str, float]:
        self.model.train()
        sums = StepSums(self.device)
        if offpolicy_masked is not None:
            sums.add("tok/offpolicy_masked", offpolicy_masked)
        replaying = self.replay is not None and batch.routed_experts is not None
        if replaying:
            self.replay.take_stats()  # this step's forwards only (not compute_log_probs')
        for idx in self._micro_batches(batch, self.cfg.train.max_tokens_per_gpu):
            rollout = self._cat(batch.rollout_logp, idx)
            if replaying and rollout is not None:  # the mismatch R3 removes: the same forward, routed by the trainer
                with torch.no_grad():
                    free = self._forward(self.model, batch, idx, entropy_grad=False, replay=False)[0]
                sums.add("tok/mismatch_no_replay", mismatch_sum(free, rollout, self._cat(batch.loss_mask, idx)))
            logp, entropy, cu = self._forward(self.model, batch, idx, entropy_grad=self.params.entropy_coef != 0)
            mask, ref = self._cat(batch.loss_mask, idx), self._cat(batch.ref_logp, idx)
            loss, m = compute_loss(logp, self._cat(batch.old_logp, idx), ref, rollout, self._cat(batch.advantages, idx),
                                   mask, entropy, self.params, cu_seqlens=cu, normalizer=normalizer)
            loss.backward()
            sums.add_policy(m, logp, entropy, mask, rollout, ref, self._response_cu(batch, idx)[-1])
        if replaying:
            self.replay.ids = None
            replayed, changed = self.replay.take_stats()
            sums.add("routing/replayed", replayed)
            sums.add("routing/changed", changed)
        grad_norm, lr = self._optimizer_step(self.model, self.opt, self.cfg.optim.lr)
        self.step += 1
        # the weights after the step: inf/NaN means the step blew them up (e.g. optim.lr far too high)
        # while its own loss and grad norm were still finite; the nonfinite run invariant stops the run
        # on it before these weights are pushed or saved. DP replicas hold the same weights.
        return {**policy_metrics(sums.reduce(), grad_norm, lr), "train/param_norm": self._param_norm(self.model)}

    @staticmethod
    @torch.no_grad()
    def _param_norm(model) -> float:
        """Global L2 norm of the parameters, in their dtype (fp32: inf once it passes 3.4e38)."""
        return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p) for p in model.parameters()])))

    def _critic_step(self, batch: TrainBatch, normalizer: float) -> dict[str, float]:
        """One critic step on the clipped value loss (slime `value_loss_function`), aggregated like
        the policy loss; `batch.values` are the values GAE used (the clip's anchor)."""
        if self.critic is None or batch.values is None:
            raise ValueError("a batch with `returns` needs a critic (algo.advantage_estimator=ppo) and batch.values")
        self.critic.train()
        per_token = self.cfg.train.calculate_per_token_loss
        # value loss, clipfrac (aggregated like the loss), then token sums: values, returns, loss tokens
        sums = torch.zeros(5, dtype=torch.float64, device=self.device)
        for idx in self._micro_batches(batch, self.cfg.train.max_tokens_per_gpu):
            values, cu = self._values(batch, idx)
            mask, old = self._cat(batch.loss_mask, idx), self._cat(batch.values, idx)
            returns = self._cat(batch.returns, idx)
            loss_tok, clipped = value_loss(values, old, returns, self.params.value_clip)
            loss = aggregate(loss_tok, mask, per_token, cu, normalizer)
            loss.backward()
            sums += torch.stack([loss.detach().double(), aggregate(clipped, mask, per_token, cu, normalizer).double(),
                                 (old * mask).sum().double(), (returns * mask).sum().double(), mask.sum().double()])
        grad_norm, lr = self._optimizer_step(self.critic, self.critic_opt, self.cfg.optim.critic_lr)
        loss, clipfrac, v, ret, n_tok = all_reduce_sum(sums).tolist()
        n_tok = max(n_tok, 1.0)
        return {"critic/value_loss": loss, "critic/clipfrac": clipfrac, "critic/values_mean": v / n_tok,
                "critic/returns_mean": ret / n_tok, "critic/grad_norm": grad_norm, "critic/lr": lr}

    def _reduce_grads_and_clip(self, model) -> float:
        """Sum gradients over ranks (one flat buffer: one collective), then clip by global norm."""
        params = [p for p in model.parameters() if p.requires_grad]
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
        if lora.is_lora(self.model):  # the engines take the merged weights under the HF names
            return lora.merged_state_dict(self.model)
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def save(self, path: str) -> None:
        out = Path(path)
        if self.rank == 0:  # ranks hold identical replicas: one writer
            out.mkdir(parents=True, exist_ok=True)
            self.model.save_pretrained(out / _MODEL_DIR)  # LoRA: the adapter only (peft's save_pretrained)
            state = {"optimizer": self.opt.state_dict(), "step": self.step}
            if self.critic is not None:
                save_file({k: v.contiguous() for k, v in self.critic.state_dict().items()}, str(out / _CRITIC_FILE))
                state["critic_optimizer"] = self.critic_opt.state_dict()
            torch.save(state, out / _STATE_FILE)
        if self.world > 1:
            barrier(self.device)

    def save_async(self, path: str) -> None:
        """What save writes, snapshot now (host copies: training updates its tensors in place) and written by the
        background writer. The model dir holds the same files as save_pretrained's (config.json,
        generation_config.json, model.safetensors without a tied lm_head); a LoRA adapter (small) is written now."""
        self.checkpoint_writer.wait()  # one snapshot in host memory at a time
        if self.rank != 0:  # ranks hold identical replicas: one writer
            return
        out = Path(path)
        model_dir = out / _MODEL_DIR
        weights = None
        if lora.is_lora(self.model):
            self.model.save_pretrained(model_dir)
        else:
            model_dir.mkdir(parents=True, exist_ok=True)
            self.model.config.save_pretrained(model_dir)
            if getattr(self.model, "generation_config", None) is not None:
                self.model.generation_config.save_pretrained(model_dir)
            tied = {"lm_head.weight"} if self.model.config.tie_word_embeddings else set()
            weights = host_copy({k: v for k, v in self.model.state_dict().items() if k not in tied})
        state = host_copy({"optimizer": self.opt.state_dict(), "step": self.step})
        critic = None
        if self.critic is not None:
            critic = host_copy(self.critic.state_dict())
            state["critic_optimizer"] = host_copy(self.critic_opt.state_dict())

        def write() -> None:
            if weights is not None:
                save_file({k: v.contiguous() for k, v in weights.items()}, str(model_dir / "model.safetensors"),
                          metadata={"format": "pt"})
            if critic is not None:
                save_file({k: v.contiguous() for k, v in critic.items()}, str(out / _CRITIC_FILE))
            torch.save(state, out / _STATE_FILE)

        self.checkpoint_writer.start(write)

    def load(self, path: str) -> None:
        src = Path(path)
        if lora.is_lora(self.model):
            lora.load_adapter(self.model, src / _MODEL_DIR)
            missing, unexpected, tied = [], [], set()
        else:
            weights = dict(load_hf_dir(src / _MODEL_DIR))  # one file or save_pretrained's shards
            missing, unexpected = self.model.load_state_dict(weights, strict=False)
            tied = {"lm_head.weight"} if self.model.config.tie_word_embeddings else set()
        if set(missing) - tied or unexpected:
            raise RuntimeError(f"{src / _MODEL_DIR}: checkpoint does not match model.* (missing {missing}, "
                               f"unexpected {unexpected}); resume with the config the run was started with")
        state = torch.load(src / _STATE_FILE, map_location=self.device, weights_only=False)
        self.opt.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        if self.critic is not None:
            if not (src / _CRITIC_FILE).is_file() or "critic_optimizer" not in state:
                raise RuntimeError(f"{src}: no critic in this checkpoint (it was saved by a run without algo=ppo); "
                                   f"resume it with its own algo, or start the PPO run fresh")
            self.critic.load_state_dict(load_file(str(src / _CRITIC_FILE), device=str(self.device)))
            self.critic_opt.load_state_dict(state["critic_optimizer"])

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def set_cpu_threads() -> None:
    """Honour OMP_NUM_THREADS from hardware.env in actors (torch reads it only at import)."""
    n = os.environ.get("OMP_NUM_THREADS")
    if n:
        torch.set_num_threads(int(n))
