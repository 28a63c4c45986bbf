"""The sglang engine kind: one `python -m sglang.launch_server` per engine, owned by a Ray actor
placed on the engine's placement-group bundle.

GPU pinning: actors run with RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1 (hardware env), so the
server sees every GPU of the node and `--base-gpu-id` (the engine's first GPU in the plan) plus
`--tp-size` pick its GPUs, as slime does. Startup waits for /health_generate (a real one-token
generation) and fails with the server's log tail.

An engine wider than a node (rollout.gpus_per_engine = k x hardware.gpus_per_node, Plan.nodes_per_engine
k) is k server processes, one per node, each owned by its own actor on that node's bundles: `--nnodes k
--node-rank i --dist-init-addr <node 0's ip>:<port>` and the node's own `--base-gpu-id`, all with
`--tp-size` = the whole engine (slime's _compute_server_args and _allocate_rollout_engine_addr_and_ports_normal
do the same). Only node-rank 0 runs SGLang's HTTP API (tokenizer, router registration, generate, weight
updates, pause, memory release: its scheduler forwards each to the TP ranks on every node); the others
serve SGLang's stand-in /health and /health_generate (launch_dummy_health_check_server). RaySGLangEngine's
`.url` is node-rank 0's, and the k processes are started, checked (alive), stopped and so restarted together.

Run against the real SGLang 0.5.16 on the lent H100 (tests/gpu/test_sglang_engine.py); on the CPU the
same launch path runs with stand-in launchers. An engine spanning nodes needs several GPU nodes: on the CPU
its launch runs on a multi-process Ray cluster with a stand-in server per node
(tests/integration/test_sglang_multinode.py); the real SGLang across nodes is not run here (docs/sglang.md).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from rlrun.config.plan import actor_env_vars
from rlrun.rollout.engines.http import HTTPEngine
from rlrun.rollout.process import ServerProcess, free_port, free_port_range
from rlrun.rollout.engines.sglang.args import EngineSlot, server_args, to_argv
from rlrun.rollout.engines.sglang.spec import SPEC
from rlrun.rollout.engines.starting import start_all

LAUNCHER = (sys.executable, "-m", "sglang.launch_server")
# Consecutive free ports reserved at node 0's --dist-init-addr: SGLang's TCP store binds the port itself and
# its PortArgs.init_new derives ZMQ ports from port + 1 on; slime reserves 30 + sglang_dp_size there
# (slime/ray/rollout.py, get_port(30 + args.sglang_dp_size)).
DIST_INIT_PORTS = 30


def engine_slot(rank: int, gpus: list[int], host: str = "127.0.0.1", *, nnodes: int = 1, node_rank: int = 0,
                dist_init_addr: str | None = None) -> EngineSlot:
    """gpus: the engine's GPU ids on this node, from Plan.placement (role 'engine', rank = engine id);
    nnodes > 1: this node's part of an engine spanning nnodes nodes."""
    return EngineSlot(rank=rank, base_gpu_id=min(gpus), port=free_port(host), nccl_port=free_port(host),
                      nnodes=nnodes, node_rank=node_rank, dist_init_addr=dist_init_addr, host=host)


def pick_dist_init_addr(node_ip: str, dp_size: int = 1) -> str:
    """node 0's host:port for an engine spanning nodes, ports picked free on this (node 0's) machine."""
    return f"{node_ip}:{free_port_range(DIST_INIT_PORTS + dp_size, node_ip)}"


class SGLangEngine(HTTPEngine):
    probe_path = SPEC.probe_path
    def __init__(self, args: dict, *, log_dir: str | Path, env: dict[str, str] | None = None,
                 launcher: tuple[str, ...] = LAUNCHER):
        self.args = dict(args)
        self.url = f"http://{args['host']}:{args['port']}"
        self.argv = [*launcher, *to_argv(self.args)]
        self.process = ServerProcess(f"sglang engine {self.url}", self.argv,
                                     Path(log_dir) / f"sglang-{args['port']}.log",
                                     env={**os.environ, **(env or {})})

    def pull_weights(self, local_dir: str, source_dir: str, version: int) -> None:
        """The delta transport's pull, run here on the server's host: SGLang 0.5.16 has no /pull_weights (slime adds
        it by a patch, docker/patch/latest/sglang-pull_weights.patch at slime 624b824), so rlrun brings the
        host-local checkpoint to `version` itself (rlrun.rollout.delta.pull: the engines of one host pull once, under
        a file lock) and SGLang's own /update_weights_from_disk then loads it."""
        from rlrun.rollout.delta import pull

        pull(local_dir, source_dir, version, base_dir=self.args.get("model_path"))

    @classmethod
    def from_config(cls, cfg, rank: int, gpus: list[int], log_dir: str | Path, env: dict | None = None,
                    model_path: str | None = None, launcher: tuple[str, ...] = LAUNCHER, *, nnodes: int = 1,
                    node_rank: int = 0, dist_init_addr: str | None = None, host: str | None = None) -> "SGLangEngine":
        """host: where the server binds and is reached (a Ray actor passes its node's IP, so that the router on
        another node reaches it); None: rollout.router.host, for an engine on the driver's machine."""
        slot = engine_slot(rank, gpus, host or cfg.rollout.router.host, nnodes=nnodes, node_rank=node_rank,
                           dist_init_addr=dist_init_addr)
        # the plan's actor env (hardware.env: e.g. SGLang's DeepGEMM fast warm-up) under `env`: an engine started
        # here directly (a bench, a GPU test) runs with what a Ray actor of the run gets
        return cls(server_args(cfg, slot, model_path), log_dir=log_dir, env={**actor_env_vars(cfg), **(env or {})},
                   launcher=launcher)

    def start(self, timeout_s: float = 900.0) -> str:
        self.process.start()
        self.process.wait_healthy(f"{self.url}/health_generate", timeout_s, interval_s=1.0)
        return self.url

    def alive(self) -> bool:
        return self.process.alive()

    def stop(self) -> None:
        self.process.stop()


class SGLangEngineActor:
    """Ray actor body: builds the argv and picks the ports *on the actor's node* (the driver may
    run elsewhere), then owns the server process. Ray options (placement-group bundle, GPU share,
    runtime_env with the hardware env incl. NOSET_CUDA_VISIBLE_DEVICES) come from the runner.
    nnodes > 1: one node's part of an engine spanning nodes; node-rank 0 picks the dist_init_addr on its
    node, the others are given it."""

    def __init__(self, cfg, rank: int, gpus: list[int], log_dir: str, env: dict | None = None,
                 model_path: str | None = None, launcher: tuple[str, ...] = LAUNCHER, nnodes: int = 1,
                 node_rank: int = 0, dist_init_addr: str | None = None):
        import ray

        self.node_ip, self.node_id = ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id()
        if nnodes > 1 and node_rank == 0:
            dp = cfg.rollout.args_of().get("dp_size", 1)
            dist_init_addr = pick_dist_init_addr(self.node_ip, dp if isinstance(dp, int) else 1)
        self.dist_init_addr = dist_init_addr
        self.name = f"engine {rank}" + (f" node {node_rank}" if nnodes > 1 else "")
        # launcher: tests pass a stand-in server that accepts SGLang's flags
        self.engine = SGLangEngine.from_config(cfg, rank, gpus, log_dir, env=env, model_path=model_path,
                                               launcher=launcher, nnodes=nnodes, node_rank=node_rank,
                                               dist_init_addr=dist_init_addr, host=self.node_ip)

    def __repr__(self) -> str:  # Ray shows it as the actor's repr_name (dashboard, ray.util.state)
        return self.name

    def info(self) -> dict:
        """Where this part runs and what it runs: node, dist_init_addr, url, argv and the server's pid."""
        return {"node_ip": self.node_ip, "node_id": self.node_id, "dist_init_addr": self.dist_init_addr,
                "url": self.engine.url, "argv": list(self.engine.argv), "pid": self.engine.process.pid}

    def start(self, timeout_s: float = 900.0) -> str:
        return self.engine.start(timeout_s)

    def alive(self) -> bool:
        return self.engine.alive()

    def stop(self) -> None:
        self.engine.stop()

    def pull_weights(self, local_dir: str, source_dir: str, version: int) -> None:
        self.engine.pull_weights(local_dir, source_dir, version)  # on this part's node


class RaySGLangEngine(HTTPEngine):
    """What EngineGroup drives (.url, .alive(), .stop()) around the SGLangEngineActor(s) of one engine.

        parts = placement.engine_parts(i)   # the engine's bundles, one group per node
        RaySGLangEngine(cfg, i, [[b.gpu_id for b in p] for p in parts], [placement.part_options(p) for p in parts],
                        runtime_env(env), log_dir)

    gpus / actor_options: per node of the engine (lists of equal length; one entry for an engine on one
    node), or one GPU list and one options dict (an engine on one node). An engine on k > 1 nodes starts
    node-rank 0's actor first (it picks the dist_init_addr on its node), then the others, and waits for
    all k servers; `.url` is node-rank 0's (the only one the router and the weight pushes see), `.parts`
    what each part runs (node ip, url, argv). alive() is false as soon as any part is gone, and stop() ends
    every part, so EngineGroup replaces the engine as a whole. wait=False returns once the servers are asked to
    start; wait_started() waits for them (start several, then wait, and their start-ups overlap)."""
    probe_path = SPEC.probe_path

    def __init__(self, cfg, rank: int, gpus: list, actor_options, runtime_env: dict | None,
                 log_dir: str | Path, *, model_path: str | None = None, launcher: tuple[str, ...] = LAUNCHER,
                 timeout_s: float = 900.0, wait: bool = True):
        import ray

        self._ray = ray
        if isinstance(actor_options, dict):
            gpus, actor_options = [gpus], [actor_options]
        if len(gpus) != len(actor_options):
            raise ValueError(f"engine {rank}: {len(gpus)} GPU lists for {len(actor_options)} node parts")
        nnodes, env = len(gpus), (runtime_env or {}).get("env_vars")

        def part(i: int, addr: str | None):
            cls = ray.remote(SGLangEngineActor).options(**actor_options[i], runtime_env=runtime_env)
            return cls.remote(cfg, rank, gpus[i], str(log_dir), env, model_path, tuple(launcher), nnodes, i, addr)

        self.url, self.parts, self.node = "", [], ""  # once started
        self._started: list = []  # each part's start call; stop() kills the actors of a start still running
        self.actors = [part(0, None)]
        try:
            if nnodes > 1:  # node-rank 0 picked the dist_init_addr on its node: the other parts are given it
                addr = ray.get(self.actors[0].info.remote(), timeout=timeout_s)["dist_init_addr"]
                self.actors += [part(i, addr) for i in range(1, nnodes)]
            self._started = [a.start.remote(timeout_s) for a in self.actors]
        except BaseException:
            self.stop()  # never leave some of an engine's processes running
            raise
        if wait:
            self.wait_started()

    def wait_started(self) -> "RaySGLangEngine":
        """Every part's server healthy (each bounded by its own timeout_s); the engine stopped whole otherwise."""
        try:
            urls = self._ray.get(self._started)
            self.parts = self._ray.get([a.info.remote() for a in self.actors], timeout=60)
        except BaseException:
            self.stop()  # never leave some of an engine's processes running
            raise
        self.url = urls[0]
        self.node = ", ".join(p["node_ip"] for p in self.parts)  # named when the engine keeps failing
        return self

    def pull_weights(self, local_dir: str, source_dir: str, version: int) -> None:
        """Every node of the engine pulls (SGLangEngineActor.pull_weights) before /update_weights_from_disk, which
        SGLang runs on every node's ranks from the same local path."""
        self._ray.get([a.pull_weights.remote(local_dir, source_dir, version) for a in self.actors])

    def alive(self) -> bool:
        try:
            return all(self._ray.get([a.alive.remote() for a in self.actors], timeout=10))
        except Exception:  # noqa: BLE001 - an actor dead or unreachable: the engine is gone
            return False

    def stop(self) -> None:
        """Each part's server stopped by its actor, then the actors killed. An actor still in its server's start
        would take the stop only after it (the actor runs one call at a time): it is killed at once, which takes its
        server down (rlrun.rollout.process: a server dies with the thread that started it; SGLang's own processes
        die with their parent)."""
        started = self._started
        _, starting = self._ray.wait(started, num_returns=len(started), timeout=0) if started else ([], [])
        refs = [] if starting else [a.stop.remote() for a in self.actors]
        for ref in refs:
            try:
                self._ray.get(ref, timeout=30)
            except Exception:  # noqa: BLE001 - already dead: killing the actor is all that is left
                pass
        for a in self.actors:
            self._ray.kill(a)


def start(cfg, plan, placement, runtime_env: dict, model_dir: str, log_dir: str,
          watch=None, launcher: tuple[str, ...] | None = None):
    """The kind's start (rlrun.rollout.engines.protocol): the plan's engines and their restart callable.
    launcher: `python -m sglang.launch_server` unless a test passes a stand-in server."""
    def make(i: int, wait: bool = True) -> RaySGLangEngine:
        parts = placement.engine_parts(i)  # one per node: an engine spanning nodes is a server per node
        return RaySGLangEngine(cfg, i, [[b.gpu_id for b in p if b.gpu_id is not None] for p in parts],
                               [placement.part_options(p) for p in parts], runtime_env, log_dir,
                               model_path=model_dir, launcher=launcher or LAUNCHER,
                               timeout_s=cfg.rollout.engine_start_timeout_s, wait=wait)

    # every engine's servers asked to start first, then the waits: their start-ups (SGLang's imports, the weights,
    # CUDA graph capture: a minute or more each) overlap instead of adding up
    return start_all(plan.num_engines, lambda i: make(i, wait=False), lambda e: e.wait_started(), lambda e: e.stop(),
                     cfg.rollout.max_engine_restarts, watch), make
