"""Joining the trainer's process group, and summing over it; shared by the torch and megatron backends."""
from __future__ import annotations

import socket
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(minutes=10)


def join_process_group(master_addr: str, master_port: int, rank: int, world_size: int,
                       device: torch.device) -> None:
    """nccl on CUDA devices, gloo on the CPU; rank 0 hosts the rendezvous store at
    master_addr:master_port (port 0: a free port, for single-rank harnesses).

    An explicit store, not init_method="tcp://...": under torchrun TORCHELASTIC_USE_AGENT_STORE=True
    makes a tcp:// rendezvous create *clients only* (the elastic agent is assumed to host the
    store), so on any port but torchrun's own every rank waits for a server nobody starts - the
    10-minute hang of the first megatron TP=2 run (reproduced on the CPU: tools/device/README.md).
    """
    if master_port == 0:
        with socket.socket() as s:
            s.bind(("", 0))
            master_port = s.getsockname()[1]
    cuda = device.type == "cuda"
    store = dist.TCPStore(master_addr, master_port, world_size, is_master=rank == 0, timeout=TIMEOUT)
    # No device_id: bound to a device, torch creates every NCCL communicator eagerly, megatron-core's
    # ~15 parallel groups included, each with its own device buffers (~9 GiB outside PyTorch's
    # allocator on an H100 for one rank, docs/benchmarks.md). Unbound, a communicator is created at
    # its group's first collective on the current device (set by the backend before this call).
    dist.init_process_group("nccl" if cuda else "gloo", store=store, rank=rank, world_size=world_size,
                            timeout=TIMEOUT)


def barrier(device: torch.device) -> None:
    """A barrier over the default group on this rank's own GPU: the group is not bound to a device
    (join_process_group), and NCCL would otherwise guess the device from the rank."""
    if device.type == "cuda":
        dist.barrier(device_ids=[device.index if device.index is not None else torch.cuda.current_device()])
    else:
        dist.barrier()


def all_reduce_sum(t: torch.Tensor, group=None, op=dist.ReduceOp.SUM) -> torch.Tensor:
    """Sum (or `op`) `t` in place over the ranks of `group` (None: the default group); a no-op for
    one rank or without a process group (single-rank runs and tests)."""
    if dist.is_initialized() and dist.get_world_size(group) > 1:
        dist.all_reduce(t, op=op, group=group)
    return t
