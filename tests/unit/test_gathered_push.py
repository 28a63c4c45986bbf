"""A colocated tensor push gathered per engine (TransportKind.gathered): each engine's TP ranks get the payloads the
trainer ranks on their own GPUs made of their own copies, gathered to the engine's sender (the rank on its first GPU)
over gloo and posted by it; engines are pushed at once, each by its own sender.

The mapping (rlrun.rollout.transports.tensor.engine_ranks) by hand-made layouts; TrainGroup's part per rank; and
the push itself with two trainer ranks (forked processes joined over gloo, the real _Rank.push_weights and
push_tensors) into real hf engines behind the real sglang-router. Each rank holds a different model here, so the
state an engine ends with says whose payload it got. The hf engine has one TP rank (it refuses a request with more
than one payload), so the multi-payload request of a TP=2 engine is read at the post itself (every payload decoded)
and its first payload forwarded; SGLang's TP ranks reading theirs is checked on the GPUs
(tests/gpu/test_gpu_gathered_push.py)."""
from __future__ import annotations

import multiprocessing as mp
import traceback

import pytest
import torch
import torch.distributed as dist

from rlrun.config.kinds import TRANSPORTS
from rlrun.launch.train_group import TrainGroup, _Rank
from rlrun.rollout import weights as W
from rlrun.rollout.engines import group as engines_mod
from rlrun.rollout.process import free_port
from rlrun.rollout.tiny_model import build_model

pytestmark = pytest.mark.timeout(180)
# rlrun.rollout.transports.tensor.engine_ranks, through the registry (which imports the transports in its own order)
engine_ranks = TRANSPORTS["tensor"].gathered


def _gpus(*per_rank: list[int]) -> dict[int, list[tuple[int, int]]]:
    return {rank: [(0, g) for g in gpus] for rank, gpus in enumerate(per_rank)}


# ---- the mapping -------------------------------------------------------------------------------------------------

def test_tp2_dp2_trainer_with_two_tp2_engines():
    """The measured 4B layout: Megatron TP2 x DP2 on GPUs 0-3 (ranks 0,1 one TP group, 2,3 the other), two TP=2
    engines on GPUs 0,1 and 2,3: engine 0's TP ranks get ranks 0 and 1's payloads, sent by rank 0; engine 1's ranks
    2 and 3's, sent by rank 2."""
    assert engine_ranks(_gpus([0], [1], [2], [3]), _gpus([0, 1], [2, 3]), copies=2) == {0: (0, 1), 1: (2, 3)}


def test_one_gpu():
    assert engine_ranks(_gpus([0]), _gpus([0]), copies=1) == {0: (0,)}


def test_dp4_with_four_one_gpu_engines():
    assert engine_ranks(_gpus([0], [1], [2], [3]), _gpus([0], [1], [2], [3]), copies=1) == {
        0: (0,), 1: (1,), 2: (2,), 3: (3,)}


def test_the_trainer_s_order_is_not_the_engine_s():
    """Ranks map by GPU, not by number: a trainer laid out on GPUs 1, 0 gives engine 0 (GPU 0) rank 1's payload."""
    assert engine_ranks(_gpus([1], [0]), _gpus([0], [1]), copies=1) == {0: (1,), 1: (0,)}
    assert engine_ranks(_gpus([3], [2], [1], [0]), _gpus([0, 1], [2, 3]), copies=2) == {0: (3, 2), 1: (1, 0)}


def test_an_engine_gpu_with_no_trainer_rank_has_no_mapping():
    """Two trainer GPUs, an engine on GPUs 2,3 as well: nobody holds a copy on GPUs 2, 3 (the lead's push instead)."""
    assert engine_ranks(_gpus([0], [1]), _gpus([0, 1], [2, 3]), copies=2) == {0: (0, 1), 1: None}
    assert engine_ranks(_gpus([0]), _gpus([0, 1]), copies=2) == {0: None}


def test_an_engine_that_reads_one_payload_gets_its_first_gpu_s():
    """copies=1 (an engine kind without sharded weights) on two GPUs: only the rank on its first GPU is asked."""
    assert engine_ranks(_gpus([0]), _gpus([0, 1]), copies=1) == {0: (0,)}


# ---- TrainGroup's part per rank ------------------------------------------------------------------------------------

def _group(trainer: dict, engines: dict) -> TrainGroup:
    g = object.__new__(TrainGroup)  # the mapping part only: no Ray actors
    g.world, g._slots, g._said = len(trainer), {"trainer": trainer, "engine": engines}, set()
    return g


def test_each_rank_gets_its_engine_and_the_senders_their_urls():
    g = _group(_gpus([0], [1], [2], [3]), _gpus([0, 1], [2, 3]))
    roles = g._gathered(TRANSPORTS["tensor"], ["http://e0", "http://e1"], [0, 1], copies=2)
    groups = [(0, 1), (2, 3)]
    assert roles == [{"groups": groups, "mine": (0, 1), "urls": ["http://e0"]},
                     {"groups": groups, "mine": (0, 1), "urls": []},
                     {"groups": groups, "mine": (2, 3), "urls": ["http://e1"]},
                     {"groups": groups, "mine": (2, 3), "urls": []}]
    # a restarted engine 1 alone: engine 0's ranks make no payloads (rank 0 only fingerprints)
    roles = g._gathered(TRANSPORTS["tensor"], ["http://e1b"], [1], copies=2)
    assert [r["mine"] for r in roles] == [None, None, (2, 3), (2, 3)]
    assert [r["urls"] for r in roles] == [[], [], ["http://e1b"], []]


def test_an_engine_gpu_with_no_trainer_rank_falls_back_to_the_lead_s_push_and_says_so(capsys):
    g = _group(_gpus([0], [1]), _gpus([0, 1], [2, 3]))
    assert g._gathered(TRANSPORTS["tensor"], ["http://e0", "http://e1"], [0, 1], copies=2) is None
    assert g._gathered(TRANSPORTS["tensor"], ["http://e0", "http://e1"], [0, 1], copies=2) is None
    err = capsys.readouterr().err
    assert err.count("[rlrun] weight sync tensor: engine(s) [1] have a GPU with no trainer rank") == 1  # said once
    # a transport that is not gathered (NCCL), or a push to no engine: the lead rank's push as before
    assert g._gathered(TRANSPORTS["distributed"], ["http://e0"], [0], copies=2) is None
    assert _group(_gpus([0]), _gpus([0]))._gathered(TRANSPORTS["tensor"], [], [], copies=1) is None


# ---- the push, two trainer ranks over gloo -------------------------------------------------------------------------

SEEDS = {0: 21, 1: 22}  # each rank's own model: the state an engine ends with names the rank whose payload it got


class _Impl:
    def __init__(self, seed: int):
        self.state = build_model(seed=seed).state_dict()

    def sync_buckets(self, bucket_bytes):
        for bucket in W.buckets(list(self.state.items()), bucket_bytes):
            dist.barrier()  # a collective per bucket, as megatron's TP gather: a rank that skipped one hangs the others
            yield bucket


def _rank_main(rank: int, port: int, urls: list[str], gathered: dict, flattened: bool, out: mp.Queue,
               fail_at: int | None, tp_request: bool) -> None:
    """One trainer rank (a forked process): joins the gloo group and runs the real _Rank.push_weights."""
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        seen = []
        if tp_request:  # a TP=2 engine's request: decode every payload, forward the first (the hf engine has 1 rank)
            real_post = engines_mod._post

            def post(url, path, body, timeout_s=600.0):
                if path == "/update_weights_from_tensor":
                    fmt = body["load_format"]
                    seen.append([W.checksum(dict(W.deserialize_named_tensors(p, fmt)))
                                 for p in body["serialized_named_tensors"]])
                    body = dict(body, serialized_named_tensors=body["serialized_named_tensors"][:1])
                return real_post(url, path, body, timeout_s)

            engines_mod._post = post
        if fail_at is not None and fail_at < 0:  # the engine fails this rank's request for bucket -fail_at
            inner_post, sent = engines_mod._post, [0]

            def failing_post(url, path, body, timeout_s=600.0):
                if path == "/update_weights_from_tensor":
                    sent[0] += 1
                    if sent[0] == -fail_at:
                        raise RuntimeError(f"engine refused bucket {-fail_at}")
                return inner_post(url, path, body, timeout_s)

            engines_mod._post = failing_post
        elif fail_at is not None:
            real_payload, made = engines_mod._payload, [0]

            def payload(bucket, transport, load_format=None):
                made[0] += 1
                if made[0] == fail_at:
                    raise RuntimeError(f"rank {rank} could not stage bucket {fail_at}")
                return real_payload(bucket, transport, load_format)

            engines_mod._payload = payload
        r = object.__new__(_Rank)
        r.rank, r.impl, r.device, r.transport_state = rank, _Impl(SEEDS[rank]), torch.device("cpu"), {}
        how = dict(transport=TRANSPORTS["tensor"], version=7, bucket_bytes=16 << 10, engine_dtype="float32",
                   backend="gloo", copies=1, timeout_s=30.0, flush_cache=False, flattened=flattened)
        res = r.push_weights(urls, rank == 0, how, gathered)
        out.put((rank, "ok", res, seen))
    except BaseException as e:  # noqa: BLE001 - handed to the test
        out.put((rank, "error", f"{e!r}\n{traceback.format_exc()}", []))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _push(urls: list[str], roles: list[dict], flattened: bool = False, fail_at: dict | None = None,
          tp_request: bool = False) -> dict:
    ctx, port = mp.get_context("fork"), free_port()
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, port, urls, roles[r], flattened, out,
                                                  (fail_at or {}).get(r), tp_request)) for r in range(2)]
    for p in procs:
        p.start()
    got = {}
    for _ in procs:
        rank, status, res, seen = out.get(timeout=120)  # a rank that hung would end the test here
        got[rank] = (status, res, seen)
    for p in procs:
        p.join(timeout=30)
    return got


def _want(rank: int) -> str:
    return W.checksum(build_model(seed=SEEDS[rank]).state_dict())


@pytest.mark.parametrize("flattened", [False, True])
@pytest.mark.parametrize("trainer_gpus", [([0], [1]), ([1], [0])])
def test_each_engine_gets_the_payload_of_the_rank_on_its_gpu(hf_engine_pair, flattened, trainer_gpus):
    """DP=2 with two one-GPU engines: each rank is its engine's sender, both push at once; engine e ends with exactly
    the model of the rank the mapping names (a different one per rank here), and the version."""
    g = _group(_gpus(*trainer_gpus), _gpus([0], [1]))
    roles = g._gathered(TRANSPORTS["tensor"], hf_engine_pair.urls, [0, 1], copies=1)
    got = _push(hf_engine_pair.urls, roles, flattened)
    assert {r: s for r, (s, _, _) in got.items()} == {0: "ok", 1: "ok"}, got
    mapping = engine_ranks(g._slots["trainer"], g._slots["engine"], 1)
    assert hf_engine_pair.checksums() == {url: _want(mapping[e][0]) for e, url in enumerate(hf_engine_pair.urls)}
    assert set(hf_engine_pair.versions().values()) == {"7"}
    # each sender recorded whose payloads it posted: the rank on its engine's GPU
    assert {url: ranks for _, res, _ in got.values() for url, ranks in res["sources"].items()} == {
        url: list(mapping[e]) for e, url in enumerate(hf_engine_pair.urls)}
    # every rank fingerprinted its own copy (rank 0's is what TrainGroup reports)
    assert got[0][1]["fingerprint"] == W.fingerprint(build_model(seed=SEEDS[0]).state_dict())


def test_a_tp2_engine_s_request_carries_each_rank_s_payload_in_tp_order(hf_engine_pair):
    """One engine on GPUs 0, 1 with two TP ranks, trainer ranks on GPUs 1, 0: the request's payload j is the copy of
    the rank on the engine's GPU j (rank 1, then rank 0), posted by rank 1; rank 0 posts nothing."""
    g = _group(_gpus([1], [0]), _gpus([0, 1]))
    url = hf_engine_pair.urls[0]
    roles = g._gathered(TRANSPORTS["tensor"], [url], [0], copies=2)
    assert [r["urls"] for r in roles] == [[], [url]]
    got = _push([url], roles, flattened=True, tp_request=True)
    assert {r: s for r, (s, _, _) in got.items()} == {0: "ok", 1: "ok"}, got
    seen = got[1][2]
    assert len(seen) > 3 and got[0][2] == []  # several buckets, all posted by the sender
    state = {r: build_model(seed=SEEDS[r]).state_dict() for r in (0, 1)}
    buckets = {r: [W.checksum(dict(b)) for b in W.buckets(list(state[r].items()), 16 << 10)] for r in (0, 1)}
    assert seen == [[a, b] for a, b in zip(buckets[1], buckets[0])]  # TP rank 0 <- rank 1, TP rank 1 <- rank 0
    assert got[1][1]["sources"] == {url: [1, 0]} and got[0][1]["sources"] == {}
    assert hf_engine_pair.checksums(urls=[url]) == {url: _want(1)}  # the forwarded TP rank 0 payload: rank 1's model


def test_a_rank_that_fails_leaves_no_one_waiting_and_the_sender_names_it(hf_engine_pair):
    """Rank 1 (not the sender) fails to stage its second bucket: it goes on joining the exchanges to the stream's end
    and raises its own error; the sender refuses that bucket naming rank 1; neither waits for the other; the engine
    never gets the version."""
    g = _group(_gpus([0], [1]), _gpus([0, 1]))
    url = hf_engine_pair.urls[0]
    before = hf_engine_pair.versions([url])
    roles = g._gathered(TRANSPORTS["tensor"], [url], [0], copies=2)
    got = _push([url], roles, fail_at={1: 2}, tp_request=True)
    assert got[1][0] == "error" and "rank 1 could not stage bucket 2" in got[1][1]
    assert got[0][0] == "error" and "trainer rank(s) [1] made no payload for this bucket" in got[0][1]
    assert hf_engine_pair.versions([url]) == before
    # the failed push left the engines paused (half-replaced weights must not generate)
    hf_engine_pair.continue_generation()


def test_a_sender_whose_engine_fails_leaves_no_one_waiting(hf_engine_pair):
    """The engine fails the sender's request for bucket 2: the sender goes on taking the stream's buckets (a collective
    here, as megatron's TP gather) and joining each one's exchange, so rank 1 finishes its push; the sender's error
    names the bucket and the engine."""
    g = _group(_gpus([0], [1]), _gpus([0, 1]))
    url = hf_engine_pair.urls[0]
    roles = g._gathered(TRANSPORTS["tensor"], [url], [0], copies=2)
    got = _push([url], roles, fail_at={0: -2}, tp_request=True)
    assert got[1][0] == "ok" and got[1][1]["sources"] == {}
    assert got[0][0] == "error" and "weight sync stuck at bucket 2" in got[0][1] and url in got[0][1]
    hf_engine_pair.continue_generation()


def test_the_plan_says_how_a_push_reaches_each_engine():
    """rlrun plan shows the route TrainGroup takes at run time (TransportKind.gathered over the plan's slots): the 4B
    colocated layout's two TP=2 engines each get the copies of the two trainer ranks on their GPUs; NCCL has no
    such choice."""
    from rlrun.config import load
    from rlrun.config.plan import make_plan
    from rlrun.config.render import summary_lines

    base = ["hardware=h100", "model=qwen3-4b", "train.backend=megatron", "rollout.engine=sglang"]
    plan = make_plan(load(base + ["train.gpus_per_node=4", "parallelism.tp=2", "rollout.gpus_per_engine=2"]))
    assert plan.weight_sync == "tensor"
    assert plan.weight_sync_route == "gathered per engine: engine 0 <- ranks 0,1; engine 1 <- ranks 2,3"
    assert "gathered per engine: engine 0 <- ranks 0,1" in summary_lines(plan)[2]
    nccl = make_plan(load(base + ["train.gpus_per_node=2", "train.colocate=false", "rollout.num_gpus=2"]))
    assert nccl.weight_sync == "distributed" and nccl.weight_sync_route == ""
