"""The real sglang-router (sglang-router==0.3.2, Rust) as a child process of rlrun: the sglang_router router kind's
launcher (a RolloutRouter, rlrun.rollout.routers.protocol; its spec: spec.py).

Flags checked with `sglang-router launch --help` (0.3.2): --host --port --worker-urls --policy
--request-timeout-secs --health-check-interval-secs --health-failure-threshold --health-check-endpoint
--prometheus-port ... Workers are added/removed at runtime through POST /workers {"url": ...}
(answers 202: registration runs in the background, after the router's own /health probe of the
worker) and DELETE /workers/{worker_id}; GET /workers lists {"workers": [{"id", "url", ...}]}.
The older /add_worker and /remove_worker routes do not exist in this version.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import requests

from rlrun.config.engine_health import ROUTER_DELETE_S, ROUTER_GONE_S, ROUTER_LIST_S
from rlrun.rollout.process import PORT_TAKEN, ServerProcess, free_port, log_tail
from rlrun.rollout.engines.sglang.router.spec import SPEC

POLICIES = SPEC.policies


class Router:
    def __init__(self, *, policy: str = "round_robin", host: str = "127.0.0.1", port: int | None = None,
                 request_timeout_s: float = 600.0, health_check_interval_s: int = 5,
                 health_failure_threshold: int = 2, retry_max_retries: int = 3, health_check_endpoint: str = "/health",
                 log_dir: str | Path = "/tmp/rlrun-router", worker_urls: list[str] | None = None):
        if policy not in POLICIES:
            raise ValueError(f"rollout.router.policy={policy!r} unknown; sglang-router 0.3.2 offers {POLICIES}")
        self.policy, self.host, self.fixed_port = policy, host, port
        self.initial_workers = list(worker_urls or [])
        self.log_dir = Path(log_dir)
        self.flags = [
            "--policy", policy,
            "--request-timeout-secs", str(int(request_timeout_s)),
            "--health-check-interval-secs", str(int(health_check_interval_s)),
            "--health-failure-threshold", str(int(health_failure_threshold)),
            "--health-success-threshold", "1",
            # the engines' liveness probe (EngineKind.probe_path): the default /health of SGLang generates a token
            # under the lock a pause waits on, and fails while an engine is paused (a colocated run's training)
            "--health-check-endpoint", health_check_endpoint,
            "--retry-max-retries", str(int(retry_max_retries)),
            "--retry-initial-backoff-ms", "50", "--retry-max-backoff-ms", "1000",
            # A burst of failed requests would open the circuits of healthy engines too (503 for
            # cb-timeout, 60 s, stalling the rollout); EngineGroup removes dead engines instead.
            "--disable-circuit-breaker",
            "--log-level", "warn",
        ] + (["--worker-urls", *self.initial_workers] if self.initial_workers else [])
        self.port_retries = 0  # lost port races (counted; each logged)
        self._pick_ports()

    def _pick_ports(self) -> None:
        """The router binds its ports itself (0.3.2 takes no port 0): free_port() picks them, and another
        process may take one before the router binds it. start() then picks again."""
        self.port = self.fixed_port or free_port(self.host)
        self.url = f"http://{self.host}:{self.port}"
        argv = [sys.executable, "-m", "sglang_router.launch_router", "--host", self.host, "--port", str(self.port),
                *self.flags, "--prometheus-port", str(free_port(self.host))]  # default 29000 collides between routers
        self.process = ServerProcess("sglang-router", argv, self.log_dir / f"router-{self.port}.log")

    def start(self, timeout_s: float = 60.0, port_tries: int = 3) -> "Router":
        for attempt in range(1, port_tries + 1):
            self.process.start()
            try:
                self.process.wait_healthy(f"{self.url}/health", timeout_s)
                break
            except RuntimeError as exc:  # exited before healthy
                if PORT_TAKEN not in str(exc):
                    raise
                metrics_port = "FailedToCreateHTTPListener" in str(exc)  # the prometheus port (always picked here)
                if attempt == port_tries or (self.fixed_port and not metrics_port):
                    fix = (f"rollout.router.port={self.fixed_port} is in use: choose a free one, or null to let "
                           f"rlrun pick" if self.fixed_port and not metrics_port else
                           f"ports picked {port_tries} times were taken before the router bound them")
                    raise RuntimeError(f"sglang-router could not bind its port: {fix}\n{exc}") from None
                self.process.stop()
                self.port_retries += 1
                print(f"[rlrun] sglang-router: a port picked for it was taken before it bound it "
                      f"({'prometheus' if metrics_port else self.port}); retrying on new ports "
                      f"({attempt}/{port_tries - 1})", flush=True)
                self._pick_ports()
        if self.initial_workers:
            self.wait_for_workers(self.initial_workers, timeout_s)
        return self

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> "Router":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ workers
    def workers(self) -> dict[str, str]:
        """url -> worker id of the workers registered now."""
        r = requests.get(f"{self.url}/workers", timeout=ROUTER_LIST_S)
        r.raise_for_status()
        return {w["url"]: w["id"] for w in r.json()["workers"]}

    def add_worker(self, url: str, wait_s: float = 60.0) -> None:
        r = requests.post(f"{self.url}/workers", json={"url": url}, timeout=10)
        if r.status_code not in (200, 201, 202):
            raise RuntimeError(f"sglang-router refused worker {url}: HTTP {r.status_code} {r.text}")
        if wait_s:
            self.wait_for_workers([url], wait_s)

    def wait_for_workers(self, urls: list[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            missing = set(urls) - set(self.workers())
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"sglang-router did not register {sorted(missing)} within {timeout_s:.0f}s "
                                   f"(it probes each worker's /health first).\n--- router log ---\n"
                                   f"{self.log_tail()}")
            time.sleep(0.1)

    def remove_worker(self, url: str) -> bool:
        worker_id = self.workers().get(url)
        if worker_id is None:
            return False
        r = requests.delete(f"{self.url}/workers/{worker_id}", timeout=ROUTER_DELETE_S)
        if r.status_code >= 400 and r.status_code != 404:
            raise RuntimeError(f"sglang-router could not remove worker {url}: HTTP {r.status_code} {r.text}")
        deadline = time.monotonic() + ROUTER_GONE_S
        while url in self.workers() and time.monotonic() < deadline:
            time.sleep(0.05)
        return True

    def log_tail(self) -> str:
        return log_tail(self.process.log_path)
