"""Moving a trainer's state between its device and host memory (train.offload).

Colocated with the rollout engines, the trainer lends its GPU memory to them while they generate:
after the train steps and the weight export every parameter, buffer, gradient and optimizer-state
tensor goes to host memory, and back to the device before the next forward. The move copies
(`copy=True`) even when the device *is* the host, so on the CPU the same code path runs and its
round trip can be checked tensor by tensor (tests/unit/test_train_offload.py); there it only
costs a copy of a small model, and the cpu profile leaves train.offload off.

Parameters keep their identity (`param.data` is swapped, as Module.to does), so optimizer state
keyed by parameter and tied weights (embeddings = LM head) stay valid.
"""
from __future__ import annotations

import torch
from torch import nn

HOST = torch.device("cpu")


def _moved(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t.to(device, copy=True)


def move_module(module: nn.Module, device: torch.device) -> None:
    """Parameters (+ their grads) and buffers of `module` to `device`, as fresh copies."""
    with torch.no_grad():
        for p in {id(p): p for p in module.parameters()}.values():  # a tied parameter moves once
            grad = p.grad
            p.grad = None  # the old grad's device would no longer match the parameter's
            p.data = _moved(p.data, device)
            if grad is not None:
                p.grad = _moved(grad, device)
        for sub in module.modules():
            for name, b in sub._buffers.items():
                if b is not None:
                    sub._buffers[name] = _moved(b, device)


def move_optimizer(opt: torch.optim.Optimizer, device: torch.device, params: bool = False) -> None:
    """Optimizer state tensors (AdamW's moments) to `device`. Scalar state (AdamW's `step`, on
    the CPU or, for the fused kernel, on the device) stays where torch keeps it: moving it would
    break the kernel's device checks and frees nothing. params=True also moves the parameters the
    optimizer owns (megatron's fp32 master shards, which no module holds)."""
    with torch.no_grad():
        if params:
            for group in opt.param_groups:
                for p in group["params"]:
                    p.grad = None  # megatron copies main grads in from its grad buffers every step
                    p.data = _moved(p.data, device)
        for state in opt.state.values():
            for key, value in state.items():
                if torch.is_tensor(value) and value.dim() > 0:
                    state[key] = _moved(value, device)


def free_device_cache(device: torch.device) -> None:
    """Hand the caching allocator's freed blocks back, so a colocated engine can allocate them."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
