"""The control plane over SGLang's HTTP API (rlrun.rollout.api builds the bodies): what both built-in engine
kinds speak (the hf engine implements the same endpoints), so an adapter is HTTPEngine plus alive() and stop().
No torch, no ray."""
from __future__ import annotations

import requests

from rlrun.config import engine_health as H
from rlrun.rollout import api


def post(url: str, path: str, body: dict, timeout_s: float = 600.0) -> dict | None:
    # connecting gets H.CONNECT_TIMEOUT_S, the answer timeout_s: an engine whose host vanished without a
    # reset (a lost node) fails the weight push in seconds, not after the answer's 600 s
    r = requests.post(f"{url}{path}", json=body, timeout=(H.CONNECT_TIMEOUT_S, timeout_s))
    if r.status_code != 200:
        raise RuntimeError(f"POST {url}{path} failed: HTTP {r.status_code} {r.text[:500]}")
    data = r.json() if r.content else None
    if isinstance(data, dict) and data.get("success") is False:
        raise RuntimeError(f"POST {url}{path} failed: {data.get('message')}")
    return data


def flush(url: str) -> bool:
    """POST /flush_cache. SGLang flushes only a fully idle engine: 200 when it did, 400 while requests run or wait
    (then False); anything else raises."""
    r = requests.post(f"{url}/flush_cache", timeout=(H.CONNECT_TIMEOUT_S, 60))
    if r.status_code not in (200, 400):
        raise RuntimeError(f"POST {url}/flush_cache failed: HTTP {r.status_code} {r.text[:300]}")
    return r.status_code == 200


def profile(url: str, path: str, body: dict) -> bool:
    """False when the engine has no profiler (501); other errors raise."""
    r = requests.post(f"{url}{path}", json=body, timeout=120)
    if r.status_code == 501:
        return False
    r.raise_for_status()
    return True


class HTTPEngine:
    """RolloutEngine's methods for an engine at `self.url` speaking SGLang's HTTP API; a subclass adds
    alive() and stop() (its process or Ray actor)."""
    url: str
    probe_path = "/health"  # the kind's EngineKind.probe_path (a liveness probe that no pause waits on)

    def healthy(self, timeout_s: float = H.HEALTH_TIMEOUT_S) -> bool:
        try:
            return requests.get(f"{self.url}{self.probe_path}", timeout=timeout_s).status_code == 200
        except requests.RequestException:
            return False

    def pause(self, mode: str = "abort") -> None:
        post(self.url, "/pause_generation", api.pause_generation_body(mode))

    def continue_generation(self) -> None:
        post(self.url, "/continue_generation", {})

    def abort(self) -> None:
        post(self.url, "/abort_request", api.abort_request_body(abort_all=True))

    def flush_cache(self) -> bool:
        return flush(self.url)

    def release_memory(self, tags: list[str] | None = None) -> None:
        post(self.url, "/release_memory_occupation", api.memory_occupation_body(tags))

    def resume_memory(self, tags: list[str] | None = None) -> None:
        post(self.url, "/resume_memory_occupation", api.memory_occupation_body(tags))

    def load_weights(self, path: str, version: str) -> None:
        post(self.url, "/update_weights_from_disk", api.update_weights_from_disk_body(path, str(version)))

    def pull_weights(self, local_dir: str, source_dir: str, version: int) -> None:
        """POST /pull_weights: the hf engine's, and slime's SGLang patch's (docker/patch/latest/sglang-pull_weights.patch
        at slime 624b824: the same body). SGLang 0.5.16 has none: its adapter pulls on each host itself."""
        post(self.url, "/pull_weights", {"local_checkpoint_dir": local_dir, "source_dir": source_dir,
                                         "target_version": int(version)})

    def version(self) -> str:
        return requests.get(f"{self.url}/model_info", timeout=30).json()["weight_version"]

    def checksum(self, kind: str = "sha256") -> str:
        r = requests.get(f"{self.url}/rlrun/weights_checksum", params={"kind": kind}, timeout=120)
        if r.status_code != 200:
            raise RuntimeError(f"GET {self.url}/rlrun/weights_checksum?kind={kind}: HTTP {r.status_code} "
                               f"{r.text[:300]}")
        return r.json()["checksum"]

    def weight_dtype(self) -> str:
        return requests.get(f"{self.url}/server_info", timeout=30).json()["weight_dtype"]

    def start_profile(self, output_dir: str) -> bool:
        return profile(self.url, "/start_profile", {"output_dir": output_dir, "activities": ["CPU", "GPU"]})

    def stop_profile(self) -> None:
        profile(self.url, "/stop_profile", {})
