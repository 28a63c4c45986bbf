"""Test helper: run a function on N processes joined in a gloo process group."""


def run_on_gloo_ranks(worker, nprocs: int = 2) -> dict:
    """Runs `worker(rank, out)` in `nprocs` processes joined in a gloo default group (the group is
    created before and destroyed after the call) and returns {rank: what the worker put in out[rank]}.
    `worker` must be a module-level function (it is pickled into spawned processes)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_gloo_rank, args=(worker, port, nprocs, out), nprocs=nprocs, join=True)
        return dict(out)


def _gloo_rank(rank, worker, port, nprocs, out):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nprocs)
    try:
        worker(rank, out)
    finally:
        dist.destroy_process_group()
