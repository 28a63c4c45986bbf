"""Routing replay (rollout.routing_replay) in the megatron backend, on the CPU with a real megatron-core (0.19.2 where
MEGATRON_CORE_PATH names it; skipped without one; the fixture is tests/unit/test_megatron_mtp.py's), through the
backend's own path: MegatronBackend.compute_log_probs -> _micro_batches (rlrun.train.megatron.packing.pack +
routing.packed_replay_ids) -> _run (routing.set_replay in megatron-core's forward step). model=tiny-moe with 3
layers, the first one dense (model.moe.first_k_dense=1, as an engine answers: a row for every layer, the dense one
zeros), three samples of different lengths split into two micro-batches, one of them a packed (THD) row of two.

- the engine's experts, chosen to differ from the trainer's own routing (the k lowest-scoring experts of every
  token), are the experts each MoE layer's router hands its dispatcher for every position that has an engine row
  (a forward hook on megatron-core's TopKRouter reads its routing map), in both the log-prob pass and the train
  step's forward; and they change the log-probs;
- replaying the trainer's own routing (recorded from an unreplayed pass, cut into per-sample rows as an engine
  returns them) gives the unreplayed log-probs exactly: the rows land on their packed positions and layers.
On the GPU the same path runs against the torch backend: tests/gpu/test_megatron_routing_replay.py."""
import pytest
import torch

from test_megatron_mtp import megatron_cpu  # noqa: F401  (the fixture: megatron-core on a one-rank gloo group)

OVERRIDES = ["model=tiny-moe", "hardware=h100", "train.backend=megatron", "rollout.routing_replay=true",
             "parallelism.ep=1", "parallelism.tp=1", "model.num_layers=3", "model.moe.first_k_dense=1",
             "train.log_probs_max_tokens_per_gpu=20", "train.max_tokens_per_gpu=20",
             "rollout.max_response_len=4", "eval.max_response_len=4", "data.max_prompt_len=8"]
LENS, STARTS = (9, 8, 11), (4, 3, 5)


def _backend():
    """A MegatronBackend around a CPU GPTModel of the config (TP = PP = DP = 1), its routers replaying."""
    from rlrun.config import load
    from rlrun.train.megatron import model as mm
    from rlrun.train.megatron.routing import replay_routers
    from rlrun.train.megatron_backend import MegatronBackend
    cfg = load(OVERRIDES)
    mm.init_parallel(cfg.parallelism, seed=0, moe=True)
    tc = mm.transformer_config(cfg.model, cfg.parallelism, dtype=torch.float32, cpu_init=True, routing_replay=True)
    tc.moe_token_dispatcher_type = "allgather"  # the all-to-all one makes a CUDA stream
    gpt = mm.build_gpt(cfg.model, tc).eval()
    b = MegatronBackend.__new__(MegatronBackend)
    b.cfg, b.model, b.tconfig, b.device = cfg, gpt, tc, torch.device("cpu")
    b.tp_size, b.tp_rank, b.tp_group, b.pad_to, b.offloaded, b.ref, b.teacher = 1, 0, None, 1, False, None, None
    b.replay_routers = replay_routers(gpt)
    return b


def _routing_maps(routers):
    """{layer number: the routing maps ([tokens, experts] bool) its router produced, in forward order}."""
    seen = {r.router_replay.layer_number: [] for r in routers}
    hooks = [r.register_forward_hook(lambda m, i, out: seen[m.router_replay.layer_number].append(out[1].detach()))
             for r in routers]
    return seen, hooks


def test_megatron_replays_the_engines_experts_on_packed_micro_batches(megatron_cpu, monkeypatch):  # noqa: F811
    from rlrun.train.base import TrainBatch
    zeros = torch.zeros  # megatron-core's schedule counts tokens in torch.zeros(..., device="cuda")
    monkeypatch.setattr(torch, "zeros", lambda *a, **k: zeros(*a, **(k | {"device": "cpu"} if "device" in k else k)))
    b = _backend()
    m = b.cfg.model
    L, E, K = m.num_layers, m.moe.num_experts, m.moe.top_k
    assert sorted(r.router_replay.layer_number for r in b.replay_routers) == [2, 3]  # layer 1 is dense
    g = torch.Generator().manual_seed(3)
    tokens = [torch.randint(0, m.vocab_size, (n,), generator=g) for n in LENS]
    batch = TrainBatch(tokens=tokens, response_start=list(STARTS),
                       loss_mask=[torch.ones(n - s) for n, s in zip(LENS, STARTS)],
                       advantages=[torch.ones(n - s) for n, s in zip(LENS, STARTS)],
                       rollout_logp=[torch.zeros(n - s) for n, s in zip(LENS, STARTS)])
    mbs = b._micro_batches(batch, b.cfg.train.log_probs_max_tokens_per_gpu)
    assert sorted(len(mb.index) for mb in mbs) == [1, 2]  # one packed row of two samples, one of one

    # the trainer's own routing and router scores, per sample position ([n, layers, experts]), unreplayed
    scores = {}
    hooks = [r.register_forward_hook(lambda mod, i, out: scores.setdefault(mod.router_replay.layer_number, []).append(
        mod.gating(i[0]).detach().reshape(-1, E))) for r in b.replay_routers]
    seen, more = _routing_maps(b.replay_routers)
    plain = b.compute_log_probs(batch)
    for h in hooks + more:
        h.remove()

    def per_sample(packed: dict[int, list[torch.Tensor]]) -> list[torch.Tensor]:
        """{layer: one [T, ...] tensor per micro-batch} -> per sample [n, layers, ...] (dense layer: zeros)."""
        out = [None] * len(LENS)
        for k, mb in enumerate(mbs):
            off = 0
            for i in mb.index:
                rows = [packed[layer][k][off:off + LENS[i]] if layer in packed else
                        torch.zeros_like(packed[2][k][off:off + LENS[i]]) for layer in range(1, L + 1)]
                out[i] = torch.stack(rows, dim=1)
                off += LENS[i]
        return out

    own = [x.float().topk(K, dim=-1).indices.to(torch.int32)[:-1] for x in per_sample(seen)]  # engine rows: n - 1
    worst = [(-x).topk(K, dim=-1).indices.to(torch.int32)[:-1] for x in per_sample(scores)]
    for w, o in zip(worst, own):  # the engine's experts differ from the trainer's own at every MoE position
        assert not (w[:, 1:, :, None] == o[:, 1:, None, :]).any()
        w[:, 0] = 0  # an engine's row for a dense layer

    seen, hooks = _routing_maps(b.replay_routers)
    replayed = b.compute_log_probs(batch.with_(routed_experts=worst))
    for h in hooks:
        h.remove()
    used = per_sample(seen)
    for i, (u, w) in enumerate(zip(used, worst)):
        n = LENS[i]
        got = u[:n - 1, 1:].nonzero()  # (position, MoE layer, expert) the dispatcher was handed
        want = torch.stack([torch.arange(n - 1)[:, None, None].expand(n - 1, L - 1, K),
                            torch.arange(L - 1)[None, :, None].expand(n - 1, L - 1, K), w[:, 1:].long()], -1)
        assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, want.reshape(-1, 3).tolist())), i
    diff = max(float((p - r).abs().max()) for p, r in zip(plain, replayed))
    assert diff > 1e-3  # the replay takes effect (random-init experts are small: ~1e-2; 100x the bound below)

    # the trainer's own routing replayed: the unreplayed log-probs (the same experts, the same weights; the engine
    # rows list a token's k experts in expert order, the router's top-k in score order, so the k weighted expert
    # outputs are summed in another order: fp32 rounding, 2^-24 relative per operation, a few ulps of log-probs ~4)
    again = b.compute_log_probs(batch.with_(routed_experts=own))
    same = max(float((p - a).abs().max()) for p, a in zip(plain, again))
    print(f"megatron R3 on the CPU: engine experts (worst-scoring) change log-probs by up to {diff:.3e}; "
          f"the trainer's own routing replayed: {same:.1e}")
    assert same < 1e-5
    for r in b.replay_routers:  # nothing left set for the next forward (the reference's, the next step's)
        assert r.router_replay.router_replay_action is None and r.router_replay.target_topk_idx is None


def test_the_train_steps_forward_replays_the_same_experts(megatron_cpu, monkeypatch):  # noqa: F811
    """MegatronBackend._run with forward_only=False (the train step's schedule: forward then backward per micro-batch)
    hands each router the engine's ids of its micro-batch, as the log-prob pass does."""
    from rlrun.train.base import TrainBatch
    zeros = torch.zeros
    monkeypatch.setattr(torch, "zeros", lambda *a, **k: zeros(*a, **(k | {"device": "cpu"} if "device" in k else k)))
    b = _backend()
    m = b.cfg.model
    L, E, K = m.num_layers, m.moe.num_experts, m.moe.top_k
    g = torch.Generator().manual_seed(4)
    tokens = [torch.randint(0, m.vocab_size, (n,), generator=g) for n in LENS]
    routed = [torch.rand(n - 1, L, E, generator=g).argsort(-1)[..., :K].to(torch.int32) for n in LENS]
    batch = TrainBatch(tokens=tokens, response_start=list(STARTS), routed_experts=routed,
                       loss_mask=[torch.ones(n - s) for n, s in zip(LENS, STARTS)])
    mbs = b._micro_batches(batch, b.cfg.train.max_tokens_per_gpu)
    seen, hooks = _routing_maps(b.replay_routers)
    b.model.train()

    def loss(mb, hidden):
        return hidden.float().pow(2).mean(), {}
    b._run(b.model, mbs, loss, forward_only=False)
    for h in hooks:
        h.remove()
    for k, mb in enumerate(mbs):
        off = 0
        for i in mb.index:
            n = LENS[i]
            for layer in (2, 3):
                got = seen[layer][k][off:off + n - 1].nonzero()
                want = [(p, int(e)) for p in range(n - 1) for e in routed[i][p, layer - 1]]
                assert sorted(map(tuple, got.tolist())) == sorted(want), (i, layer)
            off += n
    grads = [p.grad for r in b.replay_routers for p in r.parameters()]
    assert all(gr is not None and gr.abs().sum() > 0 for gr in grads)  # the router still learns through the weights
