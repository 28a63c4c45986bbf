"""Moving a trainer's state between its device and host memory (train.offload).

Colocated with the rollout engines, the trainer lends its GPU memory to them while they generate:
after the train steps and the weight export every parameter, buffer, gradient and optimizer-state
tensor goes to host memory, and back to the device before the next forward. The move copies
(`copy=True`) even when the device *is* the host, so on the CPU the same code path runs and its
round trip can be checked tensor by tensor (tests/unit/test_train_offload.py); there it only
costs a copy of a small model, and the cpu profile leaves train.offload off.

Parameters keep their identity (`param.data` is swapped, as Module.to does), so optimizer state
keyed by parameter and tied weights (embeddings = LM head) stay valid.

From a GPU, state goes into pinned host buffers that are kept between offloads (HostCache): a
device -> pinned copy runs asynchronously at PCIe speed, whereas a fresh pageable tensor per
tensor per offload cost 7-8 s a step for Qwen3-0.6B's ~7 GB of trainer state (docs/benchmarks.md).
The price is host memory the size of the offloaded state, held for the whole run.
"""
from __future__ import annotations

import torch
from torch import nn

HOST = torch.device("cpu")


class HostCache:
    """Pinned host buffers, one per state slot (a parameter's data or grad, a module buffer, an
    optimizer-state entry), reused by every offload. The tensor handed back while offloaded *is*
    the cached buffer: the next offload overwrites it, so nothing may keep it across an onload."""

    def __init__(self):
        self._bufs: dict = {}

    def __len__(self) -> int:
        return len(self._bufs)

    def to_host(self, key, t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "cuda":  # CPU runs (tests, the harness): a plain copy, no pinning there
            return t.to(HOST, copy=True)
        buf = self._bufs.get(key)
        if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
            buf = self._bufs[key] = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        buf.copy_(t, non_blocking=True)  # complete at free_device_cache's synchronize
        return buf


def _moved(t: torch.Tensor, device: torch.device, cache: HostCache | None, key) -> torch.Tensor:
    if device.type == "cpu" and cache is not None:
        return cache.to_host(key, t)
    # onto the device: from pinned memory the copy is asynchronous and stream-ordered before any use
    return t.to(device, copy=True, non_blocking=t.is_pinned())


def move_params(params, device: torch.device, cache: HostCache | None = None) -> None:
    """Parameters (+ their grads) to `device`, as copies (into `cache`'s pinned buffers when going to the host)."""
    with torch.no_grad():
        for p in {id(p): p for p in params}.values():  # a tied parameter moves once
            grad = p.grad
            p.grad = None  # the old grad's device would no longer match the parameter's
            p.data = _moved(p.data, device, cache, (p, "data"))
            if grad is not None:
                p.grad = _moved(grad, device, cache, (p, "grad"))


def move_module(module: nn.Module, device: torch.device, cache: HostCache | None = None) -> None:
    """Parameters (+ their grads) and buffers of `module` to `device`, as copies (into `cache`'s
    pinned buffers when going to the host)."""
    move_params(module.parameters(), device, cache)
    with torch.no_grad():
        for sub in module.modules():
            for name, b in sub._buffers.items():
                if b is not None:
                    sub._buffers[name] = _moved(b, device, cache, (sub, name))


def move_optimizer(opt: torch.optim.Optimizer, device: torch.device, params: bool = False,
                   cache: HostCache | None = None) -> None:
    """Optimizer state tensors (AdamW's moments) to `device`. Scalar state (AdamW's `step`, on
    the CPU or, for the fused kernel, on the device) stays where torch keeps it: moving it would
    break the kernel's device checks and frees nothing. params=True also moves the parameters the
    optimizer owns (megatron's fp32 master shards, which no module holds)."""
    with torch.no_grad():
        if params:
            for group in opt.param_groups:
                for p in group["params"]:
                    p.grad = None  # megatron copies main grads in from its grad buffers every step
                    p.data = _moved(p.data, device, cache, (p, "data"))
        for param, state in opt.state.items():
            for key, value in state.items():
                if torch.is_tensor(value) and value.dim() > 0:
                    state[key] = _moved(value, device, cache, (param, key))


def free_device_cache(device: torch.device) -> None:
    """Wait for the asynchronous copies to the host, then hand the caching allocator's freed blocks
    back, so a colocated engine can allocate them."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
