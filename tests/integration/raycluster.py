"""A real multi-node Ray cluster on this machine: `ray start --head --block` and `ray start --address
--block` as separate processes, each with its own ports (free ones, so it cannot collide with the
embedded Ray of other tests running at the same time) and one temp dir per cluster.

Cleanup is by process id only (`ray stop` would stop every Ray on the machine): each node's
`ray start --block` process and everything below it (GCS, raylet, agents, workers) is SIGKILLed,
each pid checked against its start time so a reused pid is never hit.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlrun.launch.reaper import descendants, start_time

RAY = str(Path(sys.executable).with_name("ray"))
SRC = str(Path(__file__).resolve().parents[2] / "src")
# GCS marks a node dead after `threshold` missed health checks `period` apart (defaults 3 s x 5 after
# a 5 s delay): a lost node is noticed in ~3 s here instead of ~20 s.
FAST_HEALTH_CHECK = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "1000",
                     "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "3"}
# Token auth as `ray start --head` turns it on by default (Ray 2.60: whenever a token is found, here in
# the file RAY_AUTH_TOKEN_PATH names; rlrun.launch.auth): the head gets no RAY_AUTH_MODE. A node joining
# with `ray start --address` does not turn it on by itself (ray/scripts/scripts.py), so workers get
# RAY_AUTH_MODE=token, as Ray's token-auth docs ask of every node. One token per cluster.
TOKEN_FILE = "auth_token"


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def env(token_path: Path | None = None) -> dict[str, str]:
    """The environment of the Ray processes and of the rlrun commands the tests run (token_path: the
    cluster's auth token file, else $RAY_AUTH_TOKEN_PATH of this process, set by `LocalRayCluster.use_token`)."""
    e = dict(os.environ, PYTHONPATH=SRC, **FAST_HEALTH_CHECK)
    for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
        e.pop(k, None)
    if token_path is not None:
        e["RAY_AUTH_TOKEN_PATH"] = str(token_path)
    e["PATH"] = f"{Path(sys.executable).parent}:{e.get('PATH', '')}"
    e.pop("RAY_ADDRESS", None)
    return e


@dataclass
class Node:
    proc: subprocess.Popen
    log: Path

    def raylet_pid(self) -> int:
        for pid in descendants(self.proc.pid):
            try:
                if b"raylet" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]:
                    return pid
            except OSError:
                continue
        raise RuntimeError(f"no raylet under ray start pid {self.proc.pid}; log:\n{self.log.read_text()[-2000:]}")


@dataclass
class LocalRayCluster:
    tmp: Path
    nodes: list[Node] = field(default_factory=list)

    def __post_init__(self):
        self.gcs_port, self.dashboard_port = free_ports(2)
        self.temp_dir = self.tmp / "ray"  # short: Ray's socket paths must stay under 107 characters
        self.token_path = self.tmp / TOKEN_FILE

    def use_token(self) -> None:
        """This process's clients (state API, Jobs API, rlrun's) read the cluster's token (rlrun.launch.auth)."""
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(self.token_path)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token_path.read_text()}"}

    def state_client(self):
        """ray.util.state's client with the cluster's token (its list_* functions take no headers)."""
        from ray.util.state.api import StateApiClient

        return StateApiClient(address=self.dashboard, headers={"Content-Type": "application/json", **self.headers()})

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _start(self, args: list[str], name: str, num_cpus: int, num_gpus: int, label: str) -> Node:
        node_manager, object_manager, agent_grpc, agent_http, metrics, runtime_env, client = free_ports(7)
        log = self.tmp / f"{name}.log"
        cmd = [RAY, "start", "--block", *args, "--node-ip-address=127.0.0.1", f"--num-cpus={num_cpus}",
               f"--num-gpus={num_gpus}", f'--resources={{"{label}": 1}}',
               f"--node-manager-port={node_manager}", f"--object-manager-port={object_manager}",
               f"--dashboard-agent-grpc-port={agent_grpc}", f"--dashboard-agent-listen-port={agent_http}",
               f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={runtime_env}",
               f"--ray-client-server-port={client}", "--disable-usage-stats"]
        e = env(self.token_path)
        if "--head" not in args:
            e["RAY_AUTH_MODE"] = "token"
        proc = subprocess.Popen(cmd, env=e, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        node = Node(proc, log)
        self.nodes.append(node)
        return node

    def start_head(self, num_cpus: int, num_gpus: int) -> Node:
        """`ray start --head` with Ray's default auth settings and a token to find: token auth on."""
        import secrets

        self.tmp.mkdir(parents=True, exist_ok=True)
        self.token_path.write_text(secrets.token_hex(32))
        return self._start(["--head", f"--port={self.gcs_port}", f"--temp-dir={self.temp_dir}",
                            "--include-dashboard=true", "--dashboard-host=127.0.0.1",
                            f"--dashboard-port={self.dashboard_port}"], "head", num_cpus, num_gpus, "node_head")

    def add_worker(self, num_cpus: int, num_gpus: int) -> Node:
        i = len(self.nodes)
        # its own temp dir, as on another machine: nodes sharing one would share the runtime_env
        # cache, and one node's cleanup would delete the job's working dir under the other's driver
        return self._start([f"--address={self.address}", f"--temp-dir={self.tmp / f'ray{i}'}"], f"worker{i}",
                           num_cpus, num_gpus, f"node_worker{i}")

    def wait_nodes(self, n: int, timeout_s: float = 120) -> None:
        """Until n nodes are alive (read through the dashboard's state API, as `rlrun submit` does)."""
        from ray.util.state.common import ListApiOptions, StateResource

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.proc.poll() is not None:
                    raise RuntimeError(f"ray start exited {node.proc.returncode}:\n{node.log.read_text()[-3000:]}")
            try:
                found = self.state_client().list(StateResource.NODES, options=ListApiOptions(),
                                                 raise_on_missing_output=False)
                alive = [x for x in found if x.state == "ALIVE"]
                if len(alive) >= n:
                    return
            except Exception:  # noqa: BLE001 - the dashboard is still starting
                pass
            time.sleep(1.0)
        raise TimeoutError(f"{n} Ray nodes did not come up in {timeout_s} s")

    def kill(self, node: Node) -> None:
        """Every process of one node, by pid (SIGKILL; start times checked)."""
        procs = [(p, start_time(p)) for p in [node.proc.pid, *descendants(node.proc.pid)]]
        for pid, started in procs:
            if started and start_time(pid) == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        node.proc.wait(timeout=30)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            self.kill(node)
        self.nodes = []
