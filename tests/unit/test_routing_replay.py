"""Rollout routing replay (R3, rollout.routing_replay; docs/rollout.md "Routing replay"): the hf engine returns
the experts each MoE layer chose per position in SGLang 0.5.16's form (meta_info.routed_experts, base64 int32
[seqlen - 1 - routed_experts_start_len, layers, top_k]), they travel on the Sample, and the trainer's routers
replay them. Real parts: transformers' Qwen3MoeForCausalLM, the hf engine, the rules.

Tolerance of "equal": the engine (KV-cached decode of a left-padded batch) and the trainer (one packed forward)
compute the same fp32 function in different orders; with the same experts their log-probs differ by rounding
only: measured <= 1e-6 here (dense and replayed alike), a few float32 ulps of log-probs of magnitude ~4
(ulp(4) = 2^-21 = 4.8e-7). 1e-5 leaves 20 ulps; a changed expert moves a log-prob by 1e-2 to 1 (measured 0.93).
"""
from __future__ import annotations

import base64

import pytest
import torch

from rlrun.config import ConfigError, load
from rlrun.config.kinds import ENGINES, EngineKind
from rlrun.data.sample import RoutedExperts, Sample
from rlrun.loops.steps import to_train_batch
from rlrun.rollout import api
from rlrun.rollout.client import fill_sample
from rlrun.rollout.generate_api import append_tokens
from rlrun.rollout.hf_engine import HFEngine
from rlrun.rollout.routing import RoutingReplay, moe_routers, packed_ids
from rlrun.rollout.tiny_model import build_model, build_moe_model, build_tokenizer

TOL = 1e-5  # module docstring
L, K = 2, 2  # build_moe_model: 2 layers, top-2 of 8 experts


def _generate(model, prompts, max_new_tokens=12, **extra):
    engine = HFEngine(model, build_tokenizer(), seed=0)
    try:
        body = {"input_ids": prompts, "return_logprob": True, "return_routed_experts": True,
                "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True}, **extra}
        items, _ = api.parse_generate_request(body, engine.new_rid)
        return [f.result(timeout=120).to_json() for f in engine.submit(items)]
    finally:
        engine.shutdown()


def _ids(meta) -> torch.Tensor:
    r = RoutedExperts.from_base64(meta["routed_experts"], L, K)
    return torch.tensor(r.ids(), dtype=torch.long).reshape(r.rows, L, K)


def _trainer_logp(model, prompt, out, replay=None, routed=None):
    tokens = torch.tensor(prompt + out["output_ids"])[None]
    if replay is not None:
        replay.ids = None if routed is None else packed_ids([routed], [tokens.shape[1]], L, K)
    with torch.no_grad():
        logits = model(input_ids=tokens).logits[0].float()
    if replay is not None:
        replay.ids = None
    rows = torch.log_softmax(logits, -1)[len(prompt) - 1:-1]
    return rows.gather(-1, tokens[0, len(prompt):, None])[:, 0]


PROMPTS = [[3 + i, 5, 7, 9 + i, 11][: 3 + i % 3] for i in range(6)]  # prompts of 3-5 tokens: left padding


def test_routed_experts_wire_form_and_sample_rows():
    ids = list(range(3 * L * K))
    r = RoutedExperts.from_ids(ids, L, K)
    assert r.rows == 3 and r.ids() == ids
    # SGLang's detokenizer: base64 of the int32 bytes (little-endian), decoded by slime as np.int32
    assert base64.b64decode(r.to_base64()) == b"".join(i.to_bytes(4, "little") for i in ids)
    assert RoutedExperts.from_base64(r.to_base64(), L, K) == r
    more = RoutedExperts.from_ids([7] * (2 * L * K), L, K)
    assert r.extend(1, more).ids() == ids[:L * K] + [7] * (2 * L * K)
    with pytest.raises(ValueError, match="whole rows"):
        RoutedExperts(b"\0" * 12, L, K)
    with pytest.raises(ValueError, match="only 3 rows"):
        r.extend(4, more)
    s = Sample(prompt="p", prompt_tokens=[1, 2], routed_experts=r)
    assert Sample.from_dict(s.to_dict()).routed_experts == r


def test_engine_returns_each_fed_position_routed_as_a_full_forward_routes_it():
    model = build_moe_model(0)
    outs = _generate(model, PROMPTS)
    replay = RoutingReplay(model)
    for prompt, out in zip(PROMPTS, outs):
        routed = _ids(out["meta_info"])
        assert routed.shape == (len(prompt) + 12 - 1, L, K)  # seqlen - 1 rows: the last token is never fed
        # the model's own routing of the same sequence in one forward: the same experts at every position
        tokens = torch.tensor(prompt + out["output_ids"])[None]
        replay.ids = None
        own = {}
        hooks = [r.register_forward_hook(lambda m, a, o, i=i: own.__setitem__(i, o[2]))
                 for i, r in moe_routers(model).items()]
        with torch.no_grad():
            model(input_ids=tokens)
        for h in hooks:
            h.remove()
        full = torch.stack([own[i] for i in range(L)], 1)[:-1]
        assert torch.equal(full.sort(-1).values, routed.sort(-1).values)
    # routed_experts_start_len: positions [start, seqlen - 1) only (SGLang's io_struct comment)
    start = _generate(model, PROMPTS[:1], routed_experts_start_len=2)[0]
    full = _generate(model, PROMPTS[:1])[0]
    assert torch.equal(_ids(start["meta_info"]), _ids(full["meta_info"])[2:])


def test_engine_refuses_what_it_cannot_route():
    with pytest.raises(api.RequestError, match="no MoE layers"):
        _generate(build_model(0), [[3, 4]])
    with pytest.raises(api.RequestError, match="higher than the number of input tokens"):
        _generate(build_moe_model(0), [[3, 4]], routed_experts_start_len=3)
    with pytest.raises(api.RequestError, match="must be true or false"):
        api.parse_generate_request({"input_ids": [3], "return_routed_experts": "yes"}, lambda: "r")
    answer = _generate(build_moe_model(0), [[3, 4]])[0]
    assert "routed_experts" in answer["meta_info"]
    plain = HFEngine(build_moe_model(0), build_tokenizer())
    try:
        items, _ = api.parse_generate_request({"input_ids": [3, 4], "sampling_params": {"max_new_tokens": 2}},
                                              plain.new_rid)
        assert "routed_experts" not in plain.submit(items)[0].result(timeout=60).to_json()["meta_info"]
    finally:
        plain.shutdown()


def test_replay_keeps_the_routers_weights_and_gradient():
    model = build_moe_model(0)
    replay = RoutingReplay(model)
    tokens = torch.tensor([[3, 4, 5, 6, 7]])
    own = {}
    hooks = [r.register_forward_hook(lambda m, a, o, i=i: own.__setitem__(i, (o[1].detach(), o[2])))
             for i, r in moe_routers(model).items()]
    with torch.no_grad():
        plain = model(input_ids=tokens).logits
        ids = torch.stack([own[i][1] for i in range(L)], 1)
        replay.ids = ids
        same = model(input_ids=tokens).logits  # replaying its own choice: the very same forward
        assert torch.equal(same, plain)
        other = (ids + 1) % 8  # other experts: the weights are the softmax of all 8 gathered there, renormalised
        replay.ids = other
        changed = model(input_ids=tokens).logits
    assert replay.take_stats() == (2 * 5 * L, 5 * L)  # two replayed forwards; the second changed every pair
    gate0 = moe_routers(model)[0]  # own_input's forward replays `other` too: own[0] holds its weights
    probs = torch.softmax(torch.nn.functional.linear(own_input(model, tokens), gate0.weight), -1)
    want = probs.gather(-1, other[:, 0])
    want = want / want.sum(-1, keepdim=True)
    assert torch.allclose(own[0][0], want, atol=1e-6) and not torch.allclose(changed, plain, atol=1e-3)
    # a row of -1: that position routes itself; the router still gets a gradient through the weights
    partial = other.clone()
    partial[2:] = -1
    replay.ids = partial
    model.zero_grad()
    model(input_ids=tokens).logits.sum().backward()
    assert gate0.weight.grad is not None and gate0.weight.grad.abs().sum() > 0
    assert torch.equal(own[0][1][2:], ids[2:, 0])
    for h in hooks:
        h.remove()


def own_input(model, tokens):
    """The input of layer 0's router: the post-attention RMSNorm of layer 0's residual stream."""
    seen = {}
    layer = model.model.layers[0]
    h = layer.mlp.gate.register_forward_pre_hook(lambda m, a: seen.__setitem__("x", a[0]))
    with torch.no_grad():
        model(input_ids=tokens)
    h.remove()
    return seen["x"]


def test_trainer_logprobs_equal_the_engines_with_replay_and_differ_without():
    """The acceptance at the model level: a near-tied router (build_moe_model's near_tie) makes float32
    rounding decide the top-k, as bf16 does at scale; the engine's experts replayed, the trainer's log-probs
    equal the engine's to TOL; routed by the trainer itself they differ by far more."""
    model = build_moe_model(0, near_tie=1e-6)
    outs = _generate(model, PROMPTS)
    replay = RoutingReplay(model)
    with_r3, without = [], []
    for prompt, out in zip(PROMPTS, outs):
        engine = torch.tensor([lp for lp, _t, _x in out["meta_info"]["output_token_logprobs"]])
        with_r3.append((_trainer_logp(model, prompt, out, replay, _ids(out["meta_info"])) - engine).abs().max())
        without.append((_trainer_logp(model, prompt, out) - engine).abs().max())
    assert max(with_r3) <= TOL  # measured 9.5e-7
    assert max(without) > 1e-2  # measured 0.93


def test_the_sample_and_the_train_batch_carry_the_routed_experts():
    shape = (L, K)
    s = Sample(prompt="p", prompt_tokens=[3, 4, 5])
    meta = {"id": "r", "weight_version": "1", "finish_reason": {"type": "length", "length": 2},
            "output_token_logprobs": [[-0.1, 6, None], [-0.2, 7, None]],
            "routed_experts": RoutedExperts.from_ids(list(range(4 * L * K)), L, K).to_base64()}
    fill_sample(s, {"text": "", "output_ids": [6, 7], "meta_info": meta}, routing_shape=shape)
    assert s.routed_experts.rows == 4  # 3 prompt + 2 output - 1
    batch = to_train_batch([s], routing_replay=True)
    assert batch.routed_experts[0].shape == (4, L, K) and batch.routed_experts[0][3, 1, 1].item() == 4 * L * K - 1
    assert to_train_batch([s]).routed_experts is None
    meta = {**meta, "output_token_logprobs": [[-0.3, 8, None]]}  # a continuation whose answer lacks a row
    with pytest.raises(Exception, match="4 rows of routed experts for 5 fed positions"):
        fill_sample(s, {"text": "", "output_ids": [8], "meta_info": meta}, append=True, routing_shape=shape)
    with pytest.raises(ValueError, match="has no routed experts"):
        to_train_batch([Sample(prompt="p", prompt_tokens=[3])], routing_replay=True)
    # a multi-turn sample: each turn's answer covers the whole sequence so far and replaces the routing
    t = Sample(prompt="p", prompt_tokens=[3, 4])
    append_tokens(t, [5], logprobs=[-0.1], trained=True, routed=RoutedExperts.from_ids([1] * (2 * L * K), L, K))
    append_tokens(t, [9, 9], trained=False)  # a tool's tokens: routed by the next turn's prefill
    append_tokens(t, [6], logprobs=[-0.2], trained=True, routed=RoutedExperts.from_ids([2] * (5 * L * K), L, K))
    assert t.routed_experts.rows == 5 and set(t.routed_experts.ids()) == {2}
    with pytest.raises(ValueError, match="fed positions"):
        append_tokens(t, [7], logprobs=[-0.3], trained=True, routed=RoutedExperts.from_ids([2] * 4, L, K))
    # the packed replay ids: -1 for each sample's last position (never fed to the engine)
    p = packed_ids([torch.zeros(2, L, K, dtype=torch.int32), torch.ones(1, L, K, dtype=torch.int32)], [3, 2], L, K)
    assert p[:, 0, 0].tolist() == [0, 0, -1, 1, -1]


def test_validate_refuses_routing_replay_where_it_cannot_work():
    assert load(["hardware=cpu", "model=tiny-moe", "rollout.routing_replay=true"]).rollout.routing_replay
    with pytest.raises(ConfigError) as e:
        load(["hardware=cpu", "rollout.routing_replay=true"])  # the dense tiny Qwen3
    assert "dense" in str(e.value)
    with ENGINES.registered(EngineKind("no_routing", needs_gpu=False, start="x:y")):
        with pytest.raises(ConfigError) as e:
            load(["hardware=cpu", "model=tiny-moe", "rollout.routing_replay=true", "rollout.engine=no_routing"])
    assert "does not return the routed experts" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load(["hardware=cpu", "model=tiny-moe", "rollout.routing_replay=true", "rollout.generate_fn=slime:m:f"])
    assert "rollout_routed_experts" in str(e.value)


def test_sglang_engines_are_started_returning_routed_experts():
    from rlrun.rollout.engines.sglang.args import EngineSlot, server_args, to_argv

    cfg = load(["hardware=h100", "model=qwen3-30b-a3b", "rollout.engine=sglang", "checkpoint.hf=/m",
                "rollout.routing_replay=true", "train.backend=torch", "parallelism.tp=1", "parallelism.ep=1",
                "parallelism.sequence_parallel=false"])
    args = server_args(cfg, EngineSlot(rank=0, base_gpu_id=0, port=30000, nccl_port=30001))
    assert args["enable_return_routed_experts"] is True and "--enable-return-routed-experts" in to_argv(args)


def test_the_client_sends_routed_expert_requests_to_the_engines_directly(tmp_path):
    """sglang-router 0.3.2 (the pin) parses /generate into a struct without return_routed_experts and drops it
    (measured with rlrun.rollout.engines.group.local_engine_group: the engine answers routed experts, the router's
    answer has none), so with routing replay the client sends /generate to the engines in turn, the next one on a
    retry: here the "router" URL is dead and an engine URL list holds a dead engine and a live one."""
    import asyncio

    from rlrun.rollout.client import RolloutClient, Sampling
    from rlrun.rollout.hf_server import ThreadedServer
    from rlrun.rollout.process import free_port
    from rlrun.rollout.tiny_model import save_tiny_model

    engine = HFEngine.from_dir(save_tiny_model(tmp_path, model=build_moe_model(0)))
    server = ThreadedServer(engine)
    live, dead = server.start(), f"http://127.0.0.1:{free_port()}"

    async def go():
        async with RolloutClient(dead, max_retries=3, backoff_s=0.01, routing_shape=(L, K),
                                 engine_urls=lambda: [dead, live]) as client:
            outs = [await client.generate(input_ids=[3, 4, 5], sampling=Sampling(max_new_tokens=3)) for _ in range(2)]
            return outs, client.retries

    try:
        outs, retries = asyncio.run(go())
    finally:
        server.stop()
        engine.shutdown()
    assert retries >= 1  # one of the two went to the dead engine first
    for out in outs:
        assert RoutedExperts.from_base64(out["meta_info"]["routed_experts"], L, K).rows == 3 + 3 - 1


def test_the_megatron_side_packs_ids_and_refuses_what_its_hook_cannot_replay():
    from rlrun.train.megatron.routing import packed_replay_ids

    # rows a sample has; its last position and the pad segment get experts 0..k-1 (megatron-core has no "-1")
    ids = packed_replay_ids([torch.full((2, L, K), 5, dtype=torch.int32), torch.full((1, L, K), 6, dtype=torch.int32)],
                            [3, 2], total=6, top_k=K)
    assert ids[:, 0].tolist() == [[5, 5], [5, 5], [0, 1], [6, 6], [0, 1], [0, 1]]
    meg = ["model=tiny-moe", "hardware=h100", "train.backend=megatron", "rollout.routing_replay=true",
           "parallelism.ep=1", "parallelism.tp=1"]
    assert load(meg).rollout.routing_replay
    with pytest.raises(ConfigError) as e:
        load([*meg, "parallelism.cp=2", "train.cuda_graphs=true"])
    paths = [p.path for p in e.value.problems]
    assert "parallelism.cp" in paths and "train.cuda_graphs" in paths
    # megatron-core routes these without asking its RouterReplay (moe_utils.topk_routing_with_score_function's fused
    # branch, TopKRouter.routing's sinkhorn branch): refused, not silently unreplayed
    with pytest.raises(ConfigError) as e:
        load([*meg, "+train.megatron.moe_router_fusion=true", "+train.megatron.moe_router_load_balancing_type=sinkhorn"])
    assert {p.path for p in e.value.problems} >= {"train.megatron.moe_router_fusion",
                                                   "train.megatron.moe_router_load_balancing_type"}


def test_sglang_refuses_a_tied_head_where_its_model_class_never_ties():
    """SGLang 0.5.16's Qwen3MoeForCausalLM builds lm_head on its own and has no tie_word_embeddings branch: a tied
    model's head is never loaded (a tied checkpoint has no lm_head.weight, the weight sync sends none). On an H200
    (copy-grpo-h100 model=tiny-moe, tied then) every engine log-prob was -ln(64) and the 'mismatch' R3 was meant to
    cut was the trainer's distance from uniform (0.131 at rollout 0; the trainer's init gives 0.133 on the CPU)."""
    from rlrun.rollout.engines.sglang.spec import UNTIED_HEAD_FAMILIES

    assert load(["hardware=h100", "model=tiny-moe"]).rollout.engine == "sglang"  # untied: served whole
    with pytest.raises(ConfigError) as e:
        load(["hardware=h100", "model=tiny-moe", "model.tie_word_embeddings=true"])
    assert [p.path for p in e.value.problems] == ["model.tie_word_embeddings"]
    assert load(["hardware=h100", "model=tiny-moe", "model.tie_word_embeddings=true", "rollout.engine=hf",
                 "rollout.gpus_per_engine=1"]).model.tie_word_embeddings  # transformers' class ties it
    assert load(["hardware=h100", "model=qwen3-0.6b"]).model.tie_word_embeddings  # SGLang's Qwen3 ties
    assert "qwen3" not in UNTIED_HEAD_FAMILIES


def test_sglang_refuses_a_qwen3_moe_head_dim_its_fused_rope_kernel_lacks():
    """SGLang 0.5.16's Qwen3-MoE writes the bf16 KV cache inside its rotary embedding on CUDA, and that path asserts
    for a head_dim without the fused kernel (seen on an H200 with head_dim 16). An FP8 KV cache, a float16 engine,
    the hf engine, ROCm and the kernel's own sizes pass."""
    from rlrun.rollout.engines.sglang.spec import FUSED_ROPE_HEAD_DIMS

    with pytest.raises(ConfigError) as e:
        load(["hardware=h100", "model=tiny-moe", "model.head_dim=16"])
    assert [p.path for p in e.value.problems] == ["model.head_dim"]
    assert "64, 128, 256, 512" in e.value.problems[0].message
    for extra in (["+rollout.sglang.kv_cache_dtype=fp8_e4m3"], ["+rollout.sglang.dtype=float16"],
                  ["rollout.engine=hf", "rollout.gpus_per_engine=1"], ["hardware=mi300x"]):
        assert load(["hardware=h100", "model=tiny-moe", "model.head_dim=16", *extra]).model.head_dim == 16, extra
    assert FUSED_ROPE_HEAD_DIMS == (64, 128, 256, 512)
    for d in FUSED_ROPE_HEAD_DIMS:
        assert load(["hardware=h100", "model=tiny-moe", f"model.head_dim={d}"]).model.head_dim == d
    assert load(["hardware=h100", "model=qwen3-0.6b", "model.head_dim=96"]).model.head_dim == 96  # dense Qwen3: unfused
