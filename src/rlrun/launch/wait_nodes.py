"""Wait until a Ray cluster has N alive nodes with at least G GPUs each (the sbatch script's barrier).

    python -m rlrun.launch.wait_nodes --address HOST:PORT --nodes N --gpus-per-node G [--timeout S]

Exits 0 once they have joined, 1 after the timeout with what had joined (so the batch job fails
with a reason instead of placing the plan on a half-started cluster).
"""
from __future__ import annotations

import argparse
import socket
import sys
import time


def joined(nodes, want_nodes: int, gpus_per_node: int) -> bool:
    return sum(1 for n in nodes if n.gpus >= gpus_per_node) >= want_nodes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlrun.launch.wait_nodes")
    p.add_argument("--address", required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--gpus-per-node", type=int, default=0)
    p.add_argument("--timeout", type=float, default=600.0)
    a = p.parse_args(argv)
    import ray

    from rlrun.launch.cluster import alive_nodes

    deadline = time.monotonic() + a.timeout
    host, _, port = a.address.rpartition(":")
    while True:  # the head's GCS may still be starting (ray.init would block for minutes on a closed port)
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                print(f"rlrun: no Ray GCS answered at {a.address} within {a.timeout:.0f} s", file=sys.stderr)
                return 1
            time.sleep(1.0)
    ray.init(address=a.address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        while not joined(nodes := alive_nodes(), a.nodes, a.gpus_per_node):
            if time.monotonic() > deadline:
                have = [(n.ip, n.gpus) for n in nodes]
                print(f"rlrun: after {a.timeout:.0f} s the Ray cluster at {a.address} has nodes (ip, GPUs) {have}; "
                      f"the plan needs {a.nodes} node(s) with {a.gpus_per_node} GPU(s) each", file=sys.stderr)
                return 1
            time.sleep(1.0)
        print(f"rlrun: {len(nodes)} Ray node(s) joined ({sum(n.gpus for n in nodes):.0f} GPUs)", flush=True)
        return 0
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
