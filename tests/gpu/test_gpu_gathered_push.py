"""The colocated tensor push gathered per engine, into real SGLang (0.5.16) engines with TP=2, on the 4B layout's
shape: N trainer ranks (one process per GPU, N = 4 where four GPUs exist, else 2), each holding the same Qwen3-4B-shaped
state (random, bf16, read from one saved checkpoint onto its own GPU, so every copy is the same bytes), and N / 2
engines of TP=2 on GPUs (0, 1), (2, 3). Each engine's TP rank j gets a CUDA IPC handle of the copy on its own GPU j,
made by the trainer rank there; the rank on the engine's first GPU gathers them (gloo) and posts the list; the engines
are pushed at once (rlrun.launch.train_group._Rank.push_weights with TrainGroup._gathered's roles, the real
push_tensors).

Checked: every rank's fingerprint is the same (the precondition: each rank holds the lead's bytes); each sender posted
the payloads of the ranks on its engine's GPUs, in TP order; every engine reports the version; after the gathered
push (the engines started from other weights, so only it can explain the match) each engine's log-probs match
transformers' on the pushed weights (LOGPROB_TOL, test_sglang_engine). Then the same state by the lead rank's push
(rank 0's copy to every TP rank, read across GPUs over NVLink: the path measured at 6.5-6.8 GB/s on 2026-11-28), and
both GB/s printed. RLRUN_GATHER_LAYERS / RLRUN_GATHER_VOCAB shrink the shape (default: Qwen3-4B's 36 layers, vocab
151,936: 8.0 GB in bf16 with the tied lm_head not sent).

Run on the lent GPUs with the kit staged: tools/device/sglang.sh, ITEMS=py:test_gpu_gathered_push.py."""
import importlib.util
import os
import time

import pytest
import requests
import torch
import torch.multiprocessing as mp

from test_sglang_engine import TEST_ARGS, _check_matches, _save

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                                 reason="needs SGLang 0.5.16 (tools/device/stage.sh with the kit in .sgl/)"),
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs (4 for the 4B layout)")]

LAYERS = int(os.environ.get("RLRUN_GATHER_LAYERS", 36))
VOCAB = int(os.environ.get("RLRUN_GATHER_VOCAB", 151936))


def _cfg(tmp, gpus: int):
    from rlrun.config import load

    return load(["hardware=h100", "model=qwen3-4b", f"model.vocab_size={VOCAB}", f"model.num_layers={LAYERS}",
                 "checkpoint.random_init=true", "rollout.engine=sglang", f"train.gpus_per_node={gpus}",
                 "rollout.gpus_per_engine=2", "rollout.mem_fraction_static=0.3", f"run.output_dir={tmp}", *TEST_ARGS])


class _State:
    """A backend's sync_buckets over a saved checkpoint loaded onto this rank's GPU."""

    def __init__(self, path: str, device: torch.device):
        from safetensors.torch import load_file
        from pathlib import Path

        self.state = {}
        for f in sorted(Path(path).glob("*.safetensors")):
            self.state.update(load_file(str(f), device=str(device)))

    def sync_buckets(self, bucket_bytes):
        from rlrun.rollout import weights as W
        yield from W.buckets(list(self.state.items()), bucket_bytes)


def _rank_main(rank: int, world: int, port: int, path: str, urls: list[str], roles: list[dict], how_args: dict,
               go, out) -> None:
    import torch.distributed as dist
    from rlrun.config.kinds import TRANSPORTS
    from rlrun.launch.train_group import _Rank

    torch.cuda.set_device(rank)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    r = object.__new__(_Rank)
    r.rank, r.device, r.transport_state = rank, torch.device("cuda", rank), {}
    r.impl = _State(path, r.device)
    how = dict(how_args, transport=TRANSPORTS["tensor"])
    for mode in ("gathered", "lead"):
        go.get()  # the test's go for each push
        dist.barrier()
        try:
            if mode == "gathered":
                res = r.push_weights(urls, rank == 0, dict(how, version="g"), roles[rank])
            else:
                res = r.push_weights(urls, rank == 0, dict(how, version="l"))
            out.put((rank, mode, "ok", res))
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.put((rank, mode, "error", repr(e)))
    dist.destroy_process_group()


def test_each_tp_rank_gets_the_copy_on_its_own_gpu(tmp_path):
    from rlrun.config.kinds import ENGINES, TRANSPORTS
    from rlrun.config.plan import slots_by_rank
    from rlrun.launch.train_group import TrainGroup
    from rlrun.rollout.engines.sglang.engine import SGLangEngine
    from rlrun.rollout.process import free_port

    world = 4 if torch.cuda.device_count() >= 4 else 2
    cfg = _cfg(tmp_path, world)
    _save(cfg, 0, tmp_path / "init")  # the engines' start
    pushed = _save(cfg, 1, tmp_path / "pushed").eval()  # on GPU 0  # the ranks' state, and transformers' check
    torch.cuda.empty_cache()
    engines = [SGLangEngine.from_config(cfg, rank=e, gpus=[2 * e, 2 * e + 1], log_dir=tmp_path,
                                        model_path=str(tmp_path / "init")) for e in range(world // 2)]
    for engine in engines:  # the servers start at once, then each is waited for
        engine.process.start()
    for engine in engines:
        engine.process.wait_healthy(f"{engine.url}/health_generate", 600, interval_s=1.0)
    ctx = mp.get_context("spawn")
    go, out, procs = [ctx.Queue() for _ in range(world)], ctx.Queue(), []
    try:
        urls = [e.url for e in engines]
        slots = [type("Slot", (), dict(node=0, gpu=g, role=role, rank=rank))
                 for g in range(world) for role, rank in (("trainer", g), ("engine", g // 2))]
        group = object.__new__(TrainGroup)
        group.world, group._said = world, set()
        group._slots = {role: slots_by_rank(slots, role) for role in ("trainer", "engine")}
        roles = group._gathered(TRANSPORTS["tensor"], urls, list(range(len(urls))), copies=2)
        assert [r["mine"] for r in roles] == [(2 * (g // 2), 2 * (g // 2) + 1) for g in range(world)]
        how = dict(bucket_bytes=cfg.rollout.weight_sync_bucket_mb << 20, engine_dtype=None, backend="gloo",
                   copies=2, tied=("lm_head.weight",), timeout_s=300.0, flush_cache=True,
                   flattened=TRANSPORTS["tensor"].flattened(ENGINES["sglang"]))
        port = free_port()
        procs = [ctx.Process(target=_rank_main, args=(r, world, port, str(tmp_path / "pushed"), urls, roles, how,
                                                      go[r], out)) for r in range(world)]
        for p in procs:
            p.start()
        results = {}
        for mode in ("gathered", "lead"):
            for q in go:
                q.put(mode)
            got = {}
            for _ in range(world):
                rank, m, status, res = out.get(timeout=900)
                assert m == mode and status == "ok", (rank, m, res)
                got[rank] = res
            results[mode] = got
            versions = {u: requests.get(f"{u}/model_info", timeout=30).json()["weight_version"] for u in urls}
            assert set(versions.values()) == {mode[0]}, versions
            if mode == "gathered":
                prints = {r: res["fingerprint"] for r, res in got.items() if res is not None}
                assert len(set(prints.values())) == 1 and len(prints) == world, prints  # every copy the same bytes
                sources = {u: s for res in got.values() if res for u, s in res["sources"].items()}
                assert sources == {u: [2 * e, 2 * e + 1] for e, u in enumerate(urls)}
                gaps = [_check_matches(u, pushed)[0] for u in urls]
        g, lead = results["gathered"], results["lead"][0]
        senders = [g[2 * e] for e in range(len(urls))]
        gathered_s = max(s["seconds"] for s in senders)
        nbytes = senders[0]["bytes"]
        print(f"SGLANG gathered tensor push, {world} trainer ranks -> {len(urls)} TP=2 engine(s), {nbytes / 1e9:.2f} GB per "
              f"engine: gathered {gathered_s:.2f} s ({nbytes / gathered_s / 1e9:.1f} GB/s per engine), lead rank's "
              f"push {lead['seconds']:.2f} s ({nbytes / lead['seconds'] / 1e9:.1f} GB/s per engine, "
              f"{lead['seconds'] / gathered_s:.1f}x); log-prob gaps after the gathered push {[round(x, 4) for x in gaps]}")
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
        for engine in engines:
            engine.stop()
