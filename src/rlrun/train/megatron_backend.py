"""The `megatron` trainer backend: megatron-core GPTModel with TP/PP/SP/EP, the distributed
optimizer, packed variable-length micro-batches, losses from rlrun.algo. CUDA only.

Same interface and same loss normalisation as the torch backend: every micro-batch loss is
divided by the *global* sample (or token) count, so gradients summed over micro-batches and DP
ranks are the gradient of the global-batch mean. megatron-core's schedule divides each
micro-batch loss by the number of micro-batches and its DDP by the DP size; the loss handed to
it is multiplied by both to undo that (see _loss_scale).

Initial weights: checkpoint.hf when given; otherwise the torch backend's random init of the same
architecture under run.seed, mapped in. The hf rollout engine builds that same init, so trainer
and engines start bit-identical without a first sync.
"""
from __future__ import annotations

import contextlib
import gc
import json
from dataclasses import fields
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

from rlrun.algo import AlgoParams, compute_loss
from rlrun.algo.token_stats import linear_logp_entropy
from rlrun.config.kinds import trainer_teacher
from rlrun.train import offload as off
from rlrun.train.async_save import host_copy
from rlrun.train.base import TrainBatch, TrainerBackend
from rlrun.train.batching import loss_normalizer, micro_batches
from rlrun.train.dist import barrier, join_process_group
from rlrun.train.step_metrics import StepSums, policy_metrics, policy_sums
from rlrun.train.torch_backend import TorchBackend

_HF_DIR = "model"
_OPTIM = "optim_rank{rank}.pt"
_ADAPTER = "adapter_model.safetensors"  # model.lora: peft's file name (rlrun.train.megatron.lora.adapter_state)
FAST_OPS = True  # rlrun.train.megatron.fast_ops; a switch for the step profiler
FUSED_ADAM = True  # rlrun.train.megatron.adam's kernel (needs FAST_OPS); off: torch's fused AdamW, for comparisons


def _hf_getter(path: str | None, model_cfg, seed: int):
    """name -> tensor from an HF checkpoint dir (lazily, shard by shard) or a seeded random init."""
    if path is None:
        from rlrun.train.hf_model import build_causal_lm, checkpoint_names
        sd = checkpoint_names(build_causal_lm(model_cfg, None, seed, dtype=torch.float32).state_dict())
        return sd.__getitem__
    from safetensors import safe_open
    root = Path(path)
    index = root / "model.safetensors.index.json"
    where = json.loads(index.read_text())["weight_map"] if index.exists() else None
    handles = {}

    def get(name):
        f = str(root / (where[name] if where else "model.safetensors"))
        if f not in handles:
            handles[f] = safe_open(f, framework="pt")
        return handles[f].get_tensor(name)
    return get


def ddp_kwargs(cfg) -> dict:
    """megatron-core DistributedDataParallelConfig kwargs: rlrun's typed settings, then train.megatron's fields of
    that dataclass unchanged (rlrun.train.megatron.passthrough; validated by rlrun validate)."""
    from rlrun.train.megatron import passthrough
    return {"grad_reduce_in_fp32": cfg.train.fp32_grads, "overlap_grad_reduce": False,
            "use_distributed_optimizer": True,
            **passthrough.to_core("DistributedDataParallelConfig", cfg.train.megatron)}


def optimizer_kwargs(cfg) -> dict:
    """megatron-core OptimizerConfig kwargs: optim.* and rlrun's fixed bf16 distributed optimizer, then
    train.megatron's OptimizerConfig fields unchanged (e.g. optimizer_cpu_offload: megatron-core's hybrid
    device optimizer)."""
    from rlrun.train.megatron import passthrough
    o = cfg.optim
    return {"optimizer": "adam", "lr": o.lr, "min_lr": o.min_lr, "weight_decay": o.weight_decay,
            "adam_beta1": o.adam_beta1, "adam_beta2": o.adam_beta2, "adam_eps": o.adam_eps,
            "clip_grad": o.clip_grad or 0.0, "bf16": True, "params_dtype": torch.bfloat16,
            "use_distributed_optimizer": True, **passthrough.to_core("OptimizerConfig", cfg.train.megatron)}


class MegatronBackend(TrainerBackend):
    def __init__(self, cfg, *, rank: int, world_size: int, gpu_id: int | None, total_steps: int):
        if gpu_id is None:
            raise ValueError("train.backend=megatron needs a GPU per trainer rank (hardware=cpu has none): "
                             "use train.backend=torch on the CPU")
        self.cfg, self.rank, self.world, self.gpu = cfg, rank, world_size, gpu_id
        # The one place the device is named. A CUDA device in every run; the CPU harness
        # (tools/device/cpu_backend_harness.py) sets cpu before init() to run the TP path over gloo.
        self.device = torch.device("cuda", gpu_id)
        self.total_steps = total_steps
        self.params = AlgoParams.from_config(cfg)
        self.needs_ref = cfg.algo.use_kl_loss or cfg.algo.kl_coef != 0
        self.step = 0
        self.offloaded = False  # train.offload: state in host memory between train phases
        self.host_cache = off.HostCache()  # pinned host buffers the offloads reuse

    # Rank 0 picks the process-group address the same way for both backends.

    # -- setup ------------------------------------------------------------------------------
    def init(self, master_addr: str = "127.0.0.1", master_port: int = 0) -> None:
        from megatron.core import parallel_state as ps
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, \
            finalize_model_grads
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

        from rlrun.train.megatron import fast_ops, model as mm, wgrad

        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.set_device(self.device)
        if not dist.is_initialized():  # rank 0 hosts the store (torchrun-safe: rlrun/train/dist.py)
            join_process_group(master_addr, master_port, self.rank, self.world, self.device)
        cfg = self.cfg
        mm.init_parallel(cfg.parallelism, cfg.run.seed, moe=cfg.model.moe is not None)
        self.tconfig = mm.transformer_config(cfg.model, cfg.parallelism, cfg.train,
                                             routing_replay=cfg.rollout.routing_replay)
        self.layer_offset = get_transformer_layer_offset(self.tconfig)
        self.tp_size = ps.get_tensor_model_parallel_world_size()
        self.tp_group = ps.get_tensor_model_parallel_group()
        self.tp_rank = ps.get_tensor_model_parallel_rank()
        self.dp_size = ps.get_data_parallel_world_size()
        self.is_last = ps.is_pipeline_last_stage()
        # SP splits the packed row over TP ranks: its length must divide by TP.
        self.pad_to = self.tp_size if self.tconfig.sequence_parallel else 1

        # "apex" or "torch" (the kernel of train.gradient_accumulation_fusion), None when off
        self.wgrad_kernel = wgrad.install(self.device) if self.tconfig.gradient_accumulation_fusion else None
        gpt = mm.build_gpt(cfg.model, self.tconfig).to(self.device)
        self._load_weights(gpt, cfg.checkpoint.hf)
        # model.mtp_num_layers: megatron-core's MTP block (rlrun.train.megatron.mtp), loaded from the checkpoint and
        # synced to the engines; trained with train.mtp.enabled, else frozen (out of the DDP and the optimizer)
        self.mtp_train = bool(cfg.model.mtp_num_layers and cfg.train.mtp.enabled)
        if cfg.model.mtp_num_layers and not self.mtp_train and getattr(gpt, "mtp_process", False):
            gpt.mtp.requires_grad_(False)
        self.lora = bool(cfg.model.lora.rank)  # model.lora: adapters on the frozen base (rlrun.train.megatron.lora)
        if self.lora:  # before the DDP: it buckets (and the optimizer holds) the trainable parameters only
            from rlrun.train.megatron import lora
            lora.wrap(gpt, cfg.model, cfg.model.lora, seed=cfg.run.seed, layer_offset=self.layer_offset,
                      tp_rank=self.tp_rank, tp_size=self.tp_size, tp_group=self.tp_group,
                      sequence_parallel=self.tconfig.sequence_parallel)
        # the frozen base weights (LoRA) live outside the DDP's buffers: train.offload moves them itself
        self.frozen_params = [q for q in gpt.parameters() if not q.requires_grad]
        self.graphs = None  # train.cuda_graphs: one micro-batch's fwd + loss + bwd per replay
        if cfg.train.cuda_graphs and cuda:
            from rlrun.train.megatron.graphs import MicroBatchGraphs
            # Micro-batch rows are padded to multiples of 1/8 of max_tokens_per_gpu and their sample
            # counts to powers of 2 (packing.bucket): a few shapes, each with its graph.
            self.bucket_tokens = max((cfg.train.max_tokens_per_gpu or 4096) // 8, 1)
            self.graphs = MicroBatchGraphs(self._micro_batch_fwd_bwd, self.device, max_graphs=32,
                                           on_fallback=self._after_failed_capture)
        # Autograd accumulates a parameter's gradient on the stream that was current when the
        # parameter's AccumulateGrad node was made, and the DDP makes (and keeps) those nodes for
        # its grad hooks. With CUDA graphs that must be the capture stream: a captured backward
        # cannot wait on the legacy default stream (seen on the H100).
        with torch.cuda.stream(self.graphs.stream) if self.graphs is not None else contextlib.nullcontext():
            self.model = DistributedDataParallel(
                config=self.tconfig, module=gpt,
                ddp_config=DistributedDataParallelConfig(**ddp_kwargs(cfg)))
        if self.graphs is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.graphs.stream)
        if FAST_OPS:
            fast_ops.install()
        self.opt = get_megatron_optimizer(OptimizerConfig(**optimizer_kwargs(cfg)), [self.model],
                                          use_gloo_process_groups=False)
        self.cpu_offload = bool(cfg.train.megatron.get("optimizer_cpu_offload"))
        if not self.cpu_offload:
            # Without Apex/TE megatron-core falls back to torch.optim.AdamW in its multi-tensor
            # (foreach) mode; the fused single-kernel mode is the fastest torch has for fp32 master
            # weights on the GPU. It must be chosen before the first step creates the state.
            # (train.megatron.optimizer_cpu_offload: megatron-core's HybridDeviceOptimizer picks its own.)
            for inner in self._inner_optimizers():
                for group in inner.optimizer.param_groups:
                    group["fused"], group["foreach"] = True, False
            self._install_fused_adam()
        # rollout.routing_replay: the actor's routers (the reference's and the teacher's route themselves)
        from rlrun.train.megatron.routing import replay_routers
        self.replay_routers = replay_routers(self.model) if cfg.rollout.routing_replay else []
        self.tconfig.finalize_model_grads_func = finalize_model_grads
        self.tconfig.no_sync_func = self.model.no_sync
        self.ref = None
        if self.needs_ref:
            self.ref = mm.build_gpt(cfg.model, mm.without_mtp(self.tconfig)).to(self.device).eval()
            from rlrun.config.torch_dist import dist_checkpoint_dir, ref_weights

            ref_dir, note = ref_weights(cfg.checkpoint.ref, cfg.checkpoint.hf)
            if cfg.checkpoint.ref is not None and cfg.checkpoint.hf is None and dist_checkpoint_dir(cfg.checkpoint.ref):
                from rlrun.train.megatron.dist_ckpt import load_torch_dist
                load_torch_dist(self.ref, cfg.checkpoint.ref)  # slime's --ref-load without an HF source
            else:
                if note:
                    import logging
                    logging.getLogger(__name__).warning(note)  # said once, when the reference model is built
                self._load_weights(self.ref, ref_dir)
            self.ref.requires_grad_(False)
        self.teacher = None
        if trainer_teacher(cfg):  # on-policy distillation: slime --opd-type megatron
            self.teacher = self._frozen(cfg.algo.distill.teacher)
        # The model, megatron-core and its imports leave millions of long-lived Python objects;
        # a full collection over them took ~50 ms inside some steps (0.20 vs 0.25 s steps of
        # Qwen3-1.7B on the H100). Frozen, they are left out of every later collection.
        gc.collect()
        gc.freeze()

    def _install_fused_adam(self) -> None:
        """rlrun.train.megatron.adam's kernel in place of megatron-core's AdamW step + master copy
        (needs Triton on an NVIDIA GPU; adam.available says why not ROCm); without it the fused
        torch AdamW above steps fp32 state, and optim.state_dtype=bf16 cannot be honoured."""
        from rlrun.train.megatron import adam, fast_ops
        want = self.cfg.optim.state_dtype
        fused = adam.STATE_DTYPES[want] if FAST_OPS and FUSED_ADAM and adam.available(self.device) else None
        if fused is None and want != "fp32":
            raise RuntimeError(f"optim.state_dtype={want} needs rlrun's fused AdamW kernel, which needs Triton on a "
                               "GPU (import triton failed, or FUSED_ADAM is off): install the triton that "
                               "matches torch, or set optim.state_dtype=fp32")
        if not FAST_OPS:
            return
        n = fast_ops.install_optimizer(self.opt, fused)
        if want != "fp32" and n != len(self._inner_optimizers()):
            raise RuntimeError(f"the fused AdamW kernel went into {n} of {len(self._inner_optimizers())} of "
                               "megatron-core's optimizers (the others are not plain distributed optimizers), "
                               f"so not all moments can be {want}: set optim.state_dtype=fp32")

    def _inner_optimizers(self):
        """The DistributedOptimizer(s) (megatron chains one per param-group kind, e.g. experts)."""
        return getattr(self.opt, "chained_optimizers", [self.opt])

    def _device_optimizers(self) -> list:
        """The torch optimizers whose state is on the GPU: with train.megatron.optimizer_cpu_offload megatron-core's
        HybridDeviceOptimizer keeps optimizer_offload_fraction of it in host memory (its CPU optimizers) and the
        rest in its gpu_optimizer, which is the only part train.offload moves."""
        if not self.cpu_offload:
            return [inner.optimizer for inner in self._inner_optimizers()]
        gpu = [getattr(inner.optimizer, "gpu_optimizer", None) for inner in self._inner_optimizers()]
        return [g for g in gpu if g is not None]

    # -- offload (train.offload) --------------------------------------------------------------
    # The DDP's parameters and grads are views into contiguous buffers: megatron-core's own
    # _ParamAndGradBuffer.offload_to_cpu/reload_from_cpu copy the params to pinned host memory and
    # free both storages (grads come back zeroed: every step starts from zero_grad_buffer anyway).
    # The distributed optimizer's fp32 master shards and Adam moments are plain tensors, moved
    # like the torch backend's; the reference model is a plain module.
    def _ddp_buffers(self) -> list:
        bufs = list(self.model.buffers) + list(getattr(self.model, "expert_parallel_buffers", []))
        if bufs and not hasattr(bufs[0], "offload_to_cpu"):
            raise NotImplementedError("this megatron-core's _ParamAndGradBuffer has no offload_to_cpu "
                                      "(megatron-core >= 0.13 has it); set train.offload=false")
        return bufs

    def offload(self) -> None:
        if self.offloaded:
            return
        if self.graphs is not None:
            self.graphs.reset()  # the parameter and grad buffers they address are freed here
        for buf in self._ddp_buffers():
            buf.offload_to_cpu(move_params=True, move_grads=True)
        for opt in self._device_optimizers():
            off.move_optimizer(opt, off.HOST, params=True, cache=self.host_cache)
        off.move_params(self.frozen_params, off.HOST, self.host_cache)
        for frozen in (self.ref, self.teacher):
            if frozen is not None:
                off.move_module(frozen, off.HOST, self.host_cache)
        self.offloaded = True
        off.free_device_cache(self.device)  # waits for the non-blocking copies to pinned memory

    def onload(self) -> None:
        if not self.offloaded:
            return
        for buf in self._ddp_buffers():
            buf.reload_from_cpu(move_params=True, move_grads=True)
        for opt in self._device_optimizers():
            off.move_optimizer(opt, self.device, params=True)
        off.move_params(self.frozen_params, self.device)
        for frozen in (self.ref, self.teacher):
            if frozen is not None:
                off.move_module(frozen, self.device)
        self.offloaded = False

    def _frozen(self, path: str):
        """A frozen model of model.*'s architecture from an HF dir or a Megatron torch_dist folder (the teacher;
        slime's --opd-teacher-load is a torch_dist folder)."""
        from rlrun.config.torch_dist import dist_checkpoint_dir
        from rlrun.train.megatron import model as mm  # megatron-core: imported where used (the package docstring)

        gpt = mm.build_gpt(self.cfg.model, mm.without_mtp(self.tconfig)).to(self.device).eval()
        if dist_checkpoint_dir(path):
            from rlrun.train.megatron.dist_ckpt import load_torch_dist
            load_torch_dist(gpt, path)
        else:
            self._load_weights(gpt, path)
        gpt.requires_grad_(False)
        return gpt

    def _load_weights(self, gpt, hf_path) -> None:
        from rlrun.train.megatron.weights import load_hf
        load_hf(gpt, self.cfg.model, _hf_getter(hf_path, self.cfg.model, self.cfg.run.seed), self.layer_offset)

    # -- forward ----------------------------------------------------------------------------
    def _micro_batches(self, batch: TrainBatch, max_tokens: int):
        from rlrun.train.megatron.packing import pack
        from rlrun.train.megatron.routing import packed_replay_ids
        groups = micro_batches(self.cfg.train, [int(x.numel()) for x in batch.tokens], max_tokens)
        mbs = [pack(batch.tokens, batch.response_start, g, self.pad_to, self.device) for g in groups]
        if self.replay_routers and batch.routed_experts is not None:
            for mb in mbs:
                mb.replay_ids = packed_replay_ids([batch.routed_experts[i] for i in mb.index],
                                                  [int(batch.tokens[i].numel()) for i in mb.index],
                                                  int(mb.tokens.shape[1]), self.cfg.model.moe.top_k).to(self.device)
        return mbs

    # The last stage's output is the final hidden states, not logits: megatron-core's
    # output_processor hook hands them over before its output layer, and the response rows'
    # log-probs and entropy come from them and the output weight in chunks
    # (rlrun.algo.token_stats.linear_logp_entropy) - no [tokens, vocab] tensor is ever kept.
    def _hidden_for_output(self, hidden_states, **_unused):
        """What the output layer would feed its GEMM: [s, b, h] gathered over sequence parallelism
        (backward: reduce-scatter) or entering the TP region (backward: all-reduce), since every
        TP rank's vocabulary shard contributes to the hidden states' gradient."""
        from megatron.core.tensor_parallel.mappings import copy_to_tensor_model_parallel_region, \
            gather_from_sequence_parallel_region
        if self.tconfig.sequence_parallel:
            return gather_from_sequence_parallel_region(hidden_states, tensor_parallel_output_grad=True,
                                                        group=self.tp_group)
        if self.tp_size > 1:
            return copy_to_tensor_model_parallel_region(hidden_states, group=self.tp_group)
        return hidden_states

    @staticmethod
    def _output_weight(model):
        """This rank's [V/tp, h] output-layer weight (the embedding's when they are tied)."""
        gpt = getattr(model, "module", model)  # under the DDP wrapper
        if gpt.share_embeddings_and_output_weights:
            return gpt.shared_embedding_or_output_weight()
        return gpt.output_layer.weight

    def _response_logp_entropy(self, model, hidden, logit_rows, targets, entropy_grad: bool):
        """Log-probs and entropy of the response tokens (fp32); the entropy carries a gradient only
        for an entropy term in the loss (else it is a metric and its backward work is skipped)."""
        from megatron.core import parallel_state as ps
        weight = self._output_weight(model)
        logp, entropy = linear_logp_entropy(
            hidden[logit_rows, 0], weight, targets, vocab_start=ps.get_tensor_model_parallel_rank() * weight.shape[0],
            group=self.tp_group if self.tp_size > 1 else None)
        return logp, entropy if entropy_grad else entropy.detach()

    def _loss_inputs(self, batch: TrainBatch, mb, normalizer: torch.Tensor,
                     mtp_tokens: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Every tensor one micro-batch's forward and loss read, on the device (a CUDA graph's inputs). mtp_tokens:
        the global batch's loss-masked tokens, the MTP loss's divisor (train.mtp.enabled)."""
        x = {"tokens": mb.tokens, "position_ids": mb.position_ids, "cu_seqlens": mb.cu_seqlens,
             "logit_rows": mb.logit_rows, "targets": mb.targets, "response_cu": mb.response_cu,
             "normalizer": normalizer}
        if mtp_tokens is not None:
            x["mtp_tokens"] = mtp_tokens
        rows = mb.logit_rows.numel()  # more than the response tokens after packing.bucket: pad rows get 0
        for name in ("loss_mask", "advantages", "old_logp", "ref_logp", "rollout_logp"):
            if getattr(batch, name) is not None:
                v = self._cat(getattr(batch, name), mb.index)
                x[name] = torch.cat([v, v.new_zeros(rows - v.numel())]) if rows > v.numel() else v
        return x

    def _policy_loss(self, hidden, x: dict[str, torch.Tensor]):
        """(loss, metric sums on the device) of one micro-batch from the last stage's hidden states (with
        train.mtp.enabled: (hidden states, the MTP layers' hidden states), rlrun.train.megatron.mtp)."""
        mtp_hidden = None
        if isinstance(hidden, tuple):
            hidden, mtp_hidden = hidden
        logp, entropy = self._response_logp_entropy(self.model, hidden, x["logit_rows"], x["targets"],
                                                    entropy_grad=self.params.entropy_coef != 0)
        mask, ref, rollout = x["loss_mask"], x.get("ref_logp"), x.get("rollout_logp")
        loss, m = compute_loss(logp, x.get("old_logp"), ref, rollout, x["advantages"], mask, entropy, self.params,
                               cu_seqlens=x["response_cu"], normalizer=x["normalizer"])
        sums = policy_sums(m, logp, entropy, mask, rollout, ref)
        if mtp_hidden is not None:
            loss, sums["train/mtp_loss"] = self._with_mtp_loss(loss, mtp_hidden, x)
        return loss, sums

    def _with_mtp_loss(self, loss, mtp_hidden, x: dict[str, torch.Tensor]):
        """The RL loss plus train.mtp.loss_scaling_factor / model.mtp_num_layers x the MTP layers' losses (megatron-
        core's weighting), and the metric: the sum over MTP layers of each one's mean loss on the loss-masked
        response tokens (slime's train/mtp_loss)."""
        from megatron.core import parallel_state as ps

        from rlrun.train.megatron.mtp_loss import mtp_loss
        weight = self._output_weight(self.model)
        mtp, _ = mtp_loss(mtp_hidden, weight, x, vocab_start=ps.get_tensor_model_parallel_rank() * weight.shape[0],
                          group=self.tp_group if self.tp_size > 1 else None, gather=self._hidden_for_output,
                          token_count=x["mtp_tokens"])
        factor = self.cfg.train.mtp.loss_scaling_factor / self.cfg.model.mtp_num_layers
        return loss + factor * mtp, mtp.detach()

    def _micro_batch_fwd_bwd(self, x: dict[str, torch.Tensor], max_seqlen: int) -> dict[str, torch.Tensor]:
        """Forward, loss and backward of one micro-batch without megatron-core's schedule: what
        train.cuda_graphs captures (PP = 1; the config rules check). The loss is multiplied by the
        DP size to undo the DDP's averaging, as in train_step."""
        from rlrun.train.megatron.packing import packed_seq_params
        hidden = self.model(x["tokens"], x["position_ids"], attention_mask=None,
                            packed_seq_params=packed_seq_params(x["cu_seqlens"], max_seqlen),
                            output_processor=self._hidden_for_output)
        loss, sums = self._policy_loss(hidden, x)
        (loss * self.dp_size).backward()
        return sums

    def _after_failed_capture(self, reason: str) -> None:
        # Capturing runs no kernel, so the main grads are as they were; drop the param.grad
        # tensors the aborted capture may have left behind.
        for p in self.model.parameters():
            p.grad = None

    def _run(self, model, mbs, loss_fn, forward_only: bool):
        from megatron.core.pipeline_parallel import get_forward_backward_func

        from rlrun.train.megatron.routing import clear_replay, set_replay

        def forward_step(data_iter, m):
            mb = next(data_iter)
            if mb.replay_ids is not None and model is self.model:  # routing replay: this micro-batch's ids
                sp = self.tconfig.sequence_parallel
                set_replay(self.replay_routers, mb.replay_ids, self.tp_rank if sp else 0, self.tp_size if sp else 1)
            out = m(mb.tokens, mb.position_ids, attention_mask=None, packed_seq_params=mb.packed_seq_params(),
                    output_processor=self._hidden_for_output)
            return out, partial(loss_fn, mb)

        try:
            return get_forward_backward_func()(
                forward_step_func=forward_step, data_iterator=iter(mbs), model=[model], num_microbatches=len(mbs),
                seq_length=max(int(mb.tokens.shape[1]) for mb in mbs), micro_batch_size=1, forward_only=forward_only)
        finally:
            clear_replay(self.replay_routers)

    def _to_all_stages(self, obj):
        """Results exist on the last PP stage; every rank of the pipeline returns them."""
        from megatron.core import parallel_state as ps
        if ps.get_pipeline_model_parallel_world_size() == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=ps.get_pipeline_model_parallel_last_rank(),
                                   group=ps.get_pipeline_model_parallel_group())
        return box[0]

    def _model_parallel_batch(self, batch: TrainBatch) -> tuple[TrainBatch, range]:
        """The driver shards a batch over all trainer ranks as if each were a DP rank, but the
        ranks of one model-parallel group (TP x PP) must run the same samples. Rebuild their union
        (in global-rank order) and return it with the positions of this rank's own shard in it."""
        from megatron.core import parallel_state as ps
        group = ps.get_model_parallel_group()
        if dist.get_world_size(group) == 1:
            return batch, range(len(batch))
        parts = [None] * dist.get_world_size(group)
        dist.all_gather_object(parts, (self.rank, batch), group=group)
        parts.sort(key=lambda p: p[0])
        start = sum(len(b) for r, b in parts if r < self.rank)
        merged = parts[0][1]
        for _, b in parts[1:]:
            merged = TrainBatch(**{f.name: None if getattr(merged, f.name) is None else
                                   getattr(merged, f.name) + getattr(b, f.name) for f in fields(TrainBatch)})
        return merged, range(start, start + len(batch))

    @torch.no_grad()
    def compute_log_probs(self, batch: TrainBatch, which: str = "actor") -> list[torch.Tensor]:
        models = {"actor": self.model, "ref": self.ref, "teacher": self.teacher}
        if which not in models:
            raise ValueError(f"which={which!r}: use 'actor', 'ref' or 'teacher'")
        model = models[which]
        if model is None:
            raise RuntimeError("no reference model: it is built only when algo.use_kl_loss or algo.kl_coef != 0"
                               if which == "ref" else "no teacher: it is built only when algo.distill.teacher is set")
        self.onload()
        model.eval()
        batch, mine = self._model_parallel_batch(batch)
        mbs = self._micro_batches(batch, self.cfg.train.log_probs_max_tokens_per_gpu)

        def collect(mb, hidden):
            logp, _ = self._response_logp_entropy(model, hidden, mb.logit_rows, mb.targets, entropy_grad=False)
            cu = mb.response_cu.tolist()
            return hidden.new_zeros(()), {i: logp[cu[k]:cu[k + 1]].cpu() for k, i in enumerate(mb.index)}

        out: dict[int, torch.Tensor] = {}
        for d in self._run(model, mbs, collect, forward_only=True) or []:
            out.update(d)
        out = self._to_all_stages(out)
        return [out[i] for i in mine]

    # -- training ---------------------------------------------------------------------------
    def compute_values(self, batch: TrainBatch) -> list[torch.Tensor]:
        # slime builds the critic as a second GPTModel whose output layer is Linear(hidden, 1), in
        # its own Ray group; that model, its optimizer and its checkpoint are not wired here yet.
        raise NotImplementedError("the megatron backend has no PPO critic yet; run algo=ppo with "
                                  "train.backend=torch, or pick a critic-free algo (grpo, gspo, reinforce_plus_plus)")

    # The same per-micro-batch gather and lr schedule as the torch backend (self.device, self.cfg,
    # self.step and self.total_steps mean the same here).
    _cat = TorchBackend._cat
    _lr = TorchBackend._lr

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        if batch.advantages is None:
            raise ValueError("train_step needs batch.advantages (computed by the loop from the rewards)")
        from megatron.core import parallel_state as ps
        self.onload()
        self.model.train()
        batch, _ = self._model_parallel_batch(batch)
        batch, offpolicy_masked = batch.fold_offpolicy_mask()
        dp_group = ps.get_data_parallel_group()
        normalizer = torch.tensor(loss_normalizer(batch.loss_mask, self.cfg.train.calculate_per_token_loss, self.device,
                                                  dp_group), dtype=torch.float32, device=self.device)
        mbs = self._micro_batches(batch, self.cfg.train.max_tokens_per_gpu)
        if self.graphs is not None:  # a few shapes, so that graphs replay (packing.bucket)
            from rlrun.train.megatron.packing import bucket
            mbs = [bucket(mb, self.bucket_tokens) for mb in mbs]
        mtp_tokens = None
        if self.mtp_train:  # the MTP loss's divisor: the loss-masked tokens of the global batch
            mtp_tokens = torch.tensor(max(loss_normalizer(batch.loss_mask, True, self.device, dp_group), 1.0),
                                      dtype=torch.float32, device=self.device)
        for mb in mbs:
            mb.loss_inputs = self._loss_inputs(batch, mb, normalizer, mtp_tokens)
        sums = StepSums(self.device)  # filled on the last pipeline stage, which computes the loss
        if offpolicy_masked is not None and self.is_last:
            sums.add("tok/offpolicy_masked", offpolicy_masked)
        self.model.zero_grad_buffer()
        self.opt.zero_grad()
        with self._mtp_running():
            self._forward_backward(mbs, sums)
        lr = self._lr(self.cfg.optim.lr)
        for group in self.opt.param_groups:
            group["lr"] = lr
        ok, grad_norm, _ = self.opt.step()
        if not ok:
            raise RuntimeError(f"optimizer step {self.step} skipped (non-finite gradients)")
        self.step += 1
        # Every rank of a DP group sits on the same stage: the reduce is over all-empty or all-full sums.
        metrics = policy_metrics(self._to_all_stages(sums.reduce(dp_group)), grad_norm, lr)
        if self.graphs is not None:
            metrics.update(self.graphs.stats())
        return metrics

    def _forward_backward(self, mbs, sums: StepSums) -> None:
        """Every micro-batch's forward, loss and backward (CUDA graphs or megatron-core's schedule)."""
        if self.graphs is not None:
            from megatron.core.distributed import finalize_model_grads
            with self.graphs:
                for mb in mbs:
                    sums.add_micro_batch(self.graphs(mb.loss_inputs, mb.max_seqlen), mb.response_tokens)
            finalize_model_grads([self.model])
        else:
            # Undo the schedule's 1/num_microbatches and the DDP's 1/dp_size (module docstring).
            scale = len(mbs) * self.dp_size

            def loss_fn(mb, hidden):
                loss, mb_sums = self._policy_loss(hidden, mb.loss_inputs)
                sums.add_micro_batch(mb_sums, mb.response_tokens)
                return loss * scale, {}

            self._run(self.model, mbs, loss_fn, forward_only=False)

    @contextlib.contextmanager
    def _mtp_running(self):
        """train.mtp.enabled: the actor's MTP block runs in the train step's forwards (only there: the log-prob
        forwards read the main head alone)."""
        gpt = getattr(self.model, "module", self.model)  # under the DDP wrapper
        if not self.mtp_train or not getattr(gpt, "mtp_process", False):
            yield
            return
        gpt.mtp_run = True
        try:
            yield
        finally:
            gpt.mtp_run = False

    # -- weights and checkpoints ------------------------------------------------------------
    def export_buckets(self, bucket_bytes: int, dtype=torch.bfloat16):
        """This PP stage's weights with HF names in buckets, TP-gathered (collective over TP); model.lora: each
        adapter merged into its layer's weight (W + alpha / rank * B A), as the torch backend exports them."""
        from rlrun.train.megatron import lora
        from rlrun.train.megatron.weights import export_hf
        return export_hf(self.model, self.cfg.model, bucket_bytes, self.layer_offset, dtype,
                         weight=lora.merger(self.model) if self.lora else None)

    def sync_buckets(self, bucket_bytes: int):
        """Each bucket TP-gathered on the GPU when the push asks for it: no host round trip (the host copy of the whole
        state and its way back bucket by bucket cost the colocated push most of its time, issue 33). Pipeline stages
        exchange their weights on the host (state_dict_for_sync), so PP > 1 keeps that path."""
        from megatron.core import parallel_state as ps
        if ps.get_pipeline_model_parallel_world_size() > 1:
            yield from super().sync_buckets(bucket_bytes)
            return
        self.onload()  # the export reads the DDP buffers (freed while offloaded); the runner offloads after the push
        for bucket in self.export_buckets(bucket_bytes):
            if self.cfg.model.tie_word_embeddings:  # the engines' state holds the tied lm_head too (fingerprinted,
                bucket += [("lm_head.weight", t) for n, t in bucket if n == "model.embed_tokens.weight"]  # not sent)
            yield bucket

    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        from megatron.core import parallel_state as ps
        self.onload()  # the export reads the DDP buffers (freed while offloaded); the runner offloads after it
        local = {k: v.cpu() for b in self.export_buckets(1 << 30) for k, v in b}
        if ps.get_pipeline_model_parallel_world_size() > 1:
            parts = [None] * ps.get_pipeline_model_parallel_world_size()
            dist.all_gather_object(parts, local, group=ps.get_pipeline_model_parallel_group())
            local = {k: v for p in parts for k, v in p.items()}
        if self.cfg.model.tie_word_embeddings:
            # A transformers state_dict lists the tied lm_head too; the engines' checksums cover it
            # (seen on the H100: without it the runner's post-sync checksum check fails).
            # A copy, not an alias: safetensors refuses to write tensors that share memory.
            local["lm_head.weight"] = local["model.embed_tokens.weight"].clone()
        return local

    def save(self, path: str) -> None:
        """HF weights (model/, written by global rank 0), and per rank its shard of the fp32 master
        weights and Adam state. megatron-core's own save_parameter_state does not round-trip with
        torch's AdamW (its per-param 'step' is missing from the saved state, KeyError on load), so
        the shards are saved as they are: resuming needs the same parallel layout (resume=auto)."""
        self._snapshot(Path(path))()
        barrier(self.device)

    def save_async(self, path: str) -> None:
        """What save writes, snapshot into host memory now (the weights' gather is a collective, as in save) and
        written by this rank's background writer while training goes on."""
        self.checkpoint_writer.wait()  # one snapshot in host memory at a time
        self.checkpoint_writer.start(self._snapshot(Path(path)))

    def _snapshot(self, out: Path):
        """Host copies of this rank's share of a checkpoint (rank 0: the HF weights; every rank: its optimizer
        shard), taken now; returns the function that writes them under `out`."""
        from safetensors.torch import save_file

        was_offloaded = self.offloaded
        if self.lora:  # model.lora: the adapter (+ modules_to_save) only, in peft's format
            weights = self._adapter_state()  # onloads; a collective
        else:
            weights = self.state_dict_for_sync()  # onloads; a collective
            if self.cfg.model.tie_word_embeddings:
                weights.pop("lm_head.weight")  # HF checkpoints of tied models store embed_tokens only
        if self.rank == 0:
            weights = host_copy(weights)
        shards = host_copy([{"state": o.optimizer.state_dict(),
                             "main": [p for g in o.optimizer.param_groups for p in g["params"]]}
                            for o in self._inner_optimizers()])
        state = {"shards": shards, "step": self.step, "world": self.world}
        if was_offloaded:
            self.offload()
        rank = self.rank
        lora_config = self._peft_config() if self.lora else None

        def write() -> None:
            out.mkdir(parents=True, exist_ok=True)
            if rank == 0:
                (out / _HF_DIR).mkdir(parents=True, exist_ok=True)
                if lora_config is not None:
                    save_file({k: v.contiguous() for k, v in weights.items()}, str(out / _HF_DIR / _ADAPTER),
                              metadata={"format": "pt"})
                    lora_config.save_pretrained(str(out / _HF_DIR))
                else:
                    save_file({k: v.contiguous() for k, v in weights.items()}, str(out / _HF_DIR / "model.safetensors"))
            torch.save(state, out / _OPTIM.format(rank=rank))

        return write

    @torch.no_grad()
    def load(self, path: str) -> None:
        self.onload()  # loads copy into the device buffers
        src = Path(path)
        state = torch.load(src / _OPTIM.format(rank=self.rank), map_location="cpu", weights_only=False)
        if state["world"] != self.world:
            raise ValueError(f"{src}: saved by {state['world']} trainer ranks, this run has {self.world}; resume "
                             "with the same train.num_nodes * train.gpus_per_node and parallelism.*")
        if self.lora:
            self._load_adapter(src / _HF_DIR)
        else:
            if (src / _HF_DIR / _ADAPTER).is_file():
                raise RuntimeError(f"{src / _HF_DIR}: this checkpoint holds a LoRA adapter only; resume it with the "
                                   "model.lora it was saved with")
            self._load_weights(self.model.module, str(src / _HF_DIR))
        for o, shard in zip(self._inner_optimizers(), state["shards"]):
            o.optimizer.load_state_dict(shard["state"])
            mains = [p for g in o.optimizer.param_groups for p in g["params"]]
            for p, saved in zip(mains, shard["main"]):
                p.copy_(saved)
        self.step = int(state["step"])

    def _adapter_state(self) -> dict[str, torch.Tensor]:
        """model.lora: the adapter and modules_to_save by peft's names, on the host (collective over TP; PP = 1,
        rlrun.train.megatron.lora_rules)."""
        from rlrun.train.megatron import lora
        self.onload()
        return {k: v.cpu() for k, v in lora.adapter_state(self.model, self.cfg.model, self.cfg.model.lora,
                                                          self.layer_offset).items()}

    def _peft_config(self):
        """peft's LoraConfig of model.lora (adapter_config.json: the folder loads with peft.PeftModel)."""
        from peft import LoraConfig
        lo = self.cfg.model.lora
        return LoraConfig(r=lo.rank, lora_alpha=lo.alpha, lora_dropout=lo.dropout, bias="none", task_type="CAUSAL_LM",
                          target_modules=list(lo.target_modules), modules_to_save=list(lo.modules_to_save) or None)

    @torch.no_grad()
    def _load_adapter(self, src: Path) -> None:
        from safetensors.torch import load_file

        from rlrun.train.megatron import lora
        f = src / _ADAPTER
        if not f.is_file():
            raise RuntimeError(f"{src}: no {_ADAPTER}: this checkpoint was saved without LoRA; resume it with "
                               "model.lora.rank=0, or start the LoRA run fresh")
        state = load_file(str(f))
        device = {k: v.to(self.device) for k, v in state.items()}
        lora.load_adapter_state(self.model, self.cfg.model, self.cfg.model.lora, device, self.layer_offset)

    def shutdown(self) -> None:
        from megatron.core import parallel_state as ps
        ps.destroy_model_parallel()
        if dist.is_initialized():
            dist.destroy_process_group()
