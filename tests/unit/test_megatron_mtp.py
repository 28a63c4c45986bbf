"""Multi-token prediction (model.mtp_num_layers, train.mtp) on the megatron backend, on the CPU with a real
megatron-core (0.16.1 where MEGATRON_CORE_PATH names it; skipped without one), as tests/unit/test_megatron_mla.py:
- the HF <-> Megatron names of DeepSeek-V3-style (GLM-4.x-MoE) and MiMo MTP layers, MiMo's swapped input_proj halves;
- a tiny checkpoint with an MTP layer (the HF model of num_layers + 1 layers: its last layer is the MTP layer's
  transformer layer, under MiMo's or DeepSeek-V3's names, plus the MTP layer's own norms and projection) loaded into
  rlrun's GPTModel and exported back bit-exactly;
- the MTP layer's hidden states against transformers' own modules (Qwen2's decoder layer, RMSNorm, rotary embedding)
  driven by hand as MiMo's MTP layer is defined, and the MTP loss against a hand computation of its cross entropy;
- the main head's logits bit-identical with and without the MTP block, and with it run or not;
- the backend's own MTP loss term (MegatronBackend._with_mtp_loss) giving the MTP weights a gradient, and none (they
  stay as loaded) when train.mtp.enabled is off.
megatron-core 0.19.2 (the GPU image's: its output_processor hook, the backend's whole train step) is
tests/gpu/test_gpu_megatron_mtp.py's."""
import os
import sys
from types import SimpleNamespace as NS

import pytest
import torch

from config_problems import config_problems

from rlrun.train.megatron.weights import hf_names, to_hf, to_megatron, tp_shard, tp_unshard

MOE = NS(num_experts=4, top_k=2, expert_ffn_hidden_size=16, shared_expert_ffn_hidden_size=16, first_k_dense=1,
         router="sigmoid", n_group=1, topk_group=1)
MLA = NS(q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10)


def tiny(family="qwen2", **over):
    d = dict(family=family, num_layers=2, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4,
             num_query_groups=2, head_dim=8, vocab_size=64, rotary_base=10000.0, rotary_percent=1.0,
             rope_scaling_factor=1.0, max_position_embeddings=256, norm_epsilon=1e-6, tie_word_embeddings=False,
             qk_layernorm=False, add_qkv_bias=True, swiglu=True, post_norms=False, moe=None, mla=None,
             mtp_num_layers=1)
    if family == "deepseek_v3":
        d.update(num_query_groups=4, head_dim=10, qk_layernorm=True, add_qkv_bias=False, moe=MOE, mla=MLA)
    return NS(**(d | over))


# ---------------------------------------------------------------- names (no megatron-core)
def test_mtp_names_follow_the_checkpoint_layout_of_each_family():
    mimo, nextn = tiny("qwen2", num_layers=36), tiny("deepseek_v3", num_layers=47)
    assert hf_names(mimo, "mtp.layers.0.enorm.weight") == ["model.mtp_layers.0.token_layernorm.weight"]
    assert hf_names(mimo, "mtp.layers.0.hnorm.weight") == ["model.mtp_layers.0.hidden_layernorm.weight"]
    assert hf_names(mimo, "mtp.layers.0.eh_proj.weight") == ["model.mtp_layers.0.input_proj.weight"]
    assert hf_names(mimo, "mtp.layers.0.final_layernorm.weight") == ["model.mtp_layers.0.final_layernorm.weight"]
    # the transformer layer: megatron-core 0.16's name and 0.19's, under MiMo's prefix
    for slot in ("transformer_layer", "mtp_model_layer"):
        assert hf_names(mimo, f"mtp.layers.0.{slot}.self_attention.linear_qkv.bias") == [
            f"model.mtp_layers.0.self_attn.{p}_proj.bias" for p in "qkv"]
        assert hf_names(mimo, f"mtp.layers.0.{slot}.mlp.linear_fc1.weight") == [
            "model.mtp_layers.0.mlp.gate_proj.weight", "model.mtp_layers.0.mlp.up_proj.weight"]
    # DeepSeek-V3 / GLM-4.7-Flash: decoder layer num_layers + i, whatever the stage's layer offset
    assert hf_names(nextn, "mtp.layers.0.eh_proj.weight", layer_offset=24) == ["model.layers.47.eh_proj.weight"]
    assert hf_names(nextn, "mtp.layers.0.enorm.weight") == ["model.layers.47.enorm.weight"]
    assert hf_names(nextn, "mtp.layers.0.hnorm.weight") == ["model.layers.47.hnorm.weight"]
    assert hf_names(nextn, "mtp.layers.0.final_layernorm.weight") == ["model.layers.47.shared_head.norm.weight"]
    assert hf_names(nextn, "mtp.layers.0.mtp_model_layer.self_attention.kv_layernorm.weight") == [
        "model.layers.47.self_attn.kv_a_layernorm.weight"]
    assert hf_names(nextn, "mtp.layers.0.transformer_layer.mlp.experts.local_experts.1.linear_fc2.weight",
                    expert_offset=2) == ["model.layers.47.mlp.experts.3.down_proj.weight"]
    with pytest.raises(KeyError, match="no HF names for MTP"):
        hf_names(tiny("llama"), "mtp.layers.0.enorm.weight")


def test_mimo_input_proj_halves_swap_and_eh_proj_splits_rows_over_tp():
    m = tiny("qwen2")
    name = "mtp.layers.0.eh_proj.weight"
    hf = torch.arange(8.).reshape(2, 4)  # MiMo: [hidden | token]
    meg = to_megatron(m, name, [hf])
    assert meg.tolist() == [[2, 3, 0, 1], [6, 7, 4, 5]]  # megatron-core's eh_proj reads [embedding | hidden]
    [(back_name, back)] = to_hf(m, name, meg)
    assert back_name == "model.mtp_layers.0.input_proj.weight" and torch.equal(back, hf)
    ds = tiny("deepseek_v3")  # DeepSeek-V3's eh_proj is already [embedding | hidden]
    assert torch.equal(to_megatron(ds, name, [hf]), hf)
    full = torch.arange(8.)[:, None]
    shards = [tp_shard(name, full, r, 2) for r in range(2)]  # column-parallel: output rows
    assert [s.flatten().tolist() for s in shards] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert torch.equal(tp_unshard(name, shards), full)


def test_mtp_rows_step_back_one_row_per_depth_inside_each_sample():
    from rlrun.train.megatron.mtp_loss import mtp_rows
    # two samples packed at [0, 5) and [5, 9); responses from position 2 and 7: main rows 1..3 and 6..7
    cu = torch.tensor([0, 5, 9])
    main = torch.tensor([1, 2, 3, 6, 7])
    rows, valid = mtp_rows(main, cu, 0)
    assert rows.tolist() == [0, 1, 2, 5, 6] and valid.all()
    rows, valid = mtp_rows(main, cu, 1)  # depth 2: row 1 - 2 < 0 and row 6 - 2 = 4 is the first sample's
    assert valid.tolist() == [False, True, True, False, True] and rows.tolist() == [0, 0, 1, 0, 5]


# ---------------------------------------------------------------- megatron-core on the CPU
@pytest.fixture
def megatron_cpu(monkeypatch):
    """megatron-core on the CPU: a one-rank gloo group (as test_megatron_mla.py's fixture)."""
    extra = os.environ.get("MEGATRON_CORE_PATH")
    if extra:
        sys.path.insert(0, extra)
    try:
        pytest.importorskip("megatron.core")
        from megatron.core import parallel_state, utils
        from packaging.version import Version
        if utils.get_te_version() is None:
            utils._te_version = Version("0.0.0")
        monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
        from megatron.core.transformer.moe import moe_utils
        if not hasattr(moe_utils, "te_general_gemm"):
            monkeypatch.setattr(moe_utils, "te_general_gemm", None, raising=False)
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", "29633")
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group("gloo", rank=0, world_size=1)
        yield
        parallel_state.destroy_model_parallel()
        torch.distributed.destroy_process_group()
    finally:
        if extra:
            sys.path.remove(extra)


def _checkpoint(model):
    """(the HF model of the main layers, a checkpoint state with its MTP layer): transformers' model of
    num_layers + 1 layers under the seed; its last layer is the MTP layer's transformer layer, renamed to the
    family's MTP names, with the MTP layer's own tensors (random) beside it."""
    from transformers import AutoModelForCausalLM

    from rlrun.train.hf_model import checkpoint_names, hf_config
    n, h = model.num_layers, model.hidden_size
    cfg = hf_config(NS(**(vars(model) | {"num_layers": n + 1})))
    torch.manual_seed(0)
    big = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa").eval()
    sd = checkpoint_names(big.state_dict())
    g = torch.Generator().manual_seed(1)
    own = {"eh_proj": torch.randn(h, 2 * h, generator=g) / h ** 0.5}
    for norm in ("enorm", "hnorm", "final"):
        own[norm] = 1 + 0.1 * torch.randn(h, generator=g)
    if model.family == "deepseek_v3":
        sd.update({f"model.layers.{n}.eh_proj.weight": own["eh_proj"], f"model.layers.{n}.enorm.weight": own["enorm"],
                   f"model.layers.{n}.hnorm.weight": own["hnorm"],
                   f"model.layers.{n}.shared_head.norm.weight": own["final"]})
    else:  # MiMo
        sd = {k.replace(f"model.layers.{n}.", "model.mtp_layers.0."): v for k, v in sd.items()}
        sd.update({"model.mtp_layers.0.input_proj.weight": own["eh_proj"],
                   "model.mtp_layers.0.token_layernorm.weight": own["enorm"],
                   "model.mtp_layers.0.hidden_layernorm.weight": own["hnorm"],
                   "model.mtp_layers.0.final_layernorm.weight": own["final"]})
    return big, sd


def _megatron(model, mtp_layers=None):
    from rlrun.train.megatron import model as mm
    par = NS(tp=1, pp=1, cp=1, ep=1, sequence_parallel=False)
    mm.init_parallel(par, seed=0, moe=model.moe is not None)
    train = NS(mtp=NS(loss_scaling_factor=0.3), recompute=NS(granularity=None, method=None, num_layers=None),
               gradient_accumulation_fusion=False, megatron={})
    cfg = mm.transformer_config(model, par, train, dtype=torch.float32, cpu_init=True)
    if model.moe is not None:
        cfg.moe_token_dispatcher_type = "allgather"  # the all-to-all one makes a CUDA stream
    return mm.build_gpt(model, cfg), cfg


def test_the_megatron_core_model_carries_the_mtp_block_and_factor(megatron_cpu):
    from megatron.core.transformer.multi_token_prediction import MultiTokenPredictionBlock
    gpt, cfg = _megatron(tiny("qwen2"))
    assert (cfg.mtp_num_layers, cfg.mtp_loss_scaling_factor) == (1, 0.3)
    assert isinstance(gpt.mtp, MultiTokenPredictionBlock) and len(gpt.mtp.layers) == 1 and gpt.mtp_process
    names = {n for n, _ in gpt.named_parameters() if n.startswith("mtp.")}
    assert {"mtp.layers.0.enorm.weight", "mtp.layers.0.hnorm.weight", "mtp.layers.0.eh_proj.weight",
            "mtp.layers.0.final_layernorm.weight"} <= names
    from rlrun.train.megatron import model as mm
    plain = mm.without_mtp(cfg)  # the reference's and teacher's config: megatron-core's GPTModel, no block
    assert plain.mtp_num_layers is None and cfg.mtp_num_layers == 1


@pytest.mark.parametrize("family", ["qwen2", "deepseek_v3"])
def test_an_mtp_checkpoint_loads_and_exports_bit_exactly(megatron_cpu, family):
    from rlrun.train.megatron.weights import export_hf, hf_tensor_count, load_hf
    model = tiny(family)
    _, sd = _checkpoint(model)
    gpt, _ = _megatron(model)
    assert load_hf(gpt, model, lambda k: sd[k]) == hf_tensor_count(gpt)
    got = dict(kv for bucket in export_hf(gpt, model, bucket_bytes=4096) for kv in bucket)
    assert got.keys() == sd.keys()
    for k, t in sd.items():
        assert torch.equal(got[k], t), k


def _loaded(model):
    from rlrun.train.megatron.weights import load_hf
    big, sd = _checkpoint(model)
    gpt, cfg = _megatron(model)
    load_hf(gpt, model, lambda k: sd[k])
    return big, sd, gpt


def _forward(gpt, tokens):
    return gpt(input_ids=tokens, position_ids=torch.arange(tokens.shape[1])[None], attention_mask=None)


def test_main_logits_are_the_same_with_and_without_the_mtp_block(megatron_cpu):
    from megatron.core import parallel_state

    from rlrun.train.megatron.weights import load_hf
    model = tiny("qwen2")
    _, sd, gpt = _loaded(model)
    gpt.eval()
    tokens = torch.randint(0, model.vocab_size, (1, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        skipped = _forward(gpt, tokens)
        gpt.mtp_run = True
        ran, mtp_hidden = _forward(gpt, tokens)
        gpt.mtp_run = False
    parallel_state.destroy_model_parallel()
    plain_model = tiny("qwen2", mtp_num_layers=0)
    plain, _ = _megatron(plain_model)
    load_hf(plain, plain_model, lambda k: sd[k])
    plain.eval()
    with torch.no_grad():
        alone = _forward(plain, tokens)
    assert torch.equal(skipped, alone) and torch.equal(ran, alone)
    assert len(mtp_hidden) == 1 and mtp_hidden[0].shape == (12, 1, model.hidden_size)


def test_mtp_hidden_states_and_loss_match_an_independent_computation(megatron_cpu):
    """MiMo's MTP layer by hand from transformers' modules: h' = final_norm(layer(input_proj([hidden_norm(h_t);
    token_norm(embed(x_{t+1}))]))) at positions t, with h the main model's final (normed) hidden states; its loss at
    the response targets: -log softmax(h' W^T)[x_{t+2}], loss-masked, over the masked token count."""
    from rlrun.train.megatron.mtp_loss import mtp_loss
    model = tiny("qwen2")
    big, sd, gpt = _loaded(model)
    gpt.eval()
    T = 12
    tokens = torch.randint(0, model.vocab_size, (1, T), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        gpt.mtp_run = True
        _, (ours,) = _forward(gpt, tokens)
        gpt.mtp_run = False
        n = model.num_layers
        # the main model's output: the input of layer n (the MTP layer's) through the final norm
        h = big.model.norm(big.model(input_ids=tokens, output_hidden_states=True).hidden_states[n])
        mtp = big.model.layers[n]
        w = sd["model.mtp_layers.0.input_proj.weight"]
        norm = lambda x, g: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + model.norm_epsilon) * g  # noqa: E731
        x = torch.cat([norm(h[:, :-1], sd["model.mtp_layers.0.hidden_layernorm.weight"]),
                       norm(big.model.embed_tokens(tokens[:, 1:]), sd["model.mtp_layers.0.token_layernorm.weight"])], -1)
        x = x @ w.T
        pos = torch.arange(T - 1)[None]
        out = mtp(x, position_embeddings=big.model.rotary_emb(x, pos), position_ids=pos, attention_mask=None)
        out = out[0] if isinstance(out, tuple) else out
        theirs = norm(out, sd["model.mtp_layers.0.final_layernorm.weight"])[0]
    # fp32, the same weights: only the order of the sums differs (SDPA vs megatron-core's attention path, the
    # fused qkv GEMM); |h'| ~ 1 after the final norm, fp32 rounding over ~10^2 sums stays below 1e-5
    err = float((ours[:T - 1, 0] - theirs).abs().max())
    print(f"MTP hidden vs transformers max_abs={err:.2e}")
    assert err < 1e-5, err

    # the loss at response tokens 6..11 (main rows 5..10; MTP rows 4..9, targets x_6..x_11), token 8 masked out
    rows = torch.arange(5, 11)
    x = {"logit_rows": rows, "targets": tokens[0, rows + 1], "loss_mask": torch.tensor([1., 1, 0, 1, 1, 1]),
         "cu_seqlens": torch.tensor([0, T], dtype=torch.int32)}
    weight = gpt.output_layer.weight
    total, (layer_sum,) = mtp_loss([ours], weight, x, vocab_start=0, group=None, gather=lambda t: t,
                                   token_count=torch.tensor(5.0))
    logp = torch.log_softmax(ours[rows - 1, 0] @ weight.T, -1)
    hand = -sum(float(logp[i, x["targets"][i]]) for i in (0, 1, 3, 4, 5))
    assert abs(float(layer_sum) - hand) < 1e-5 * abs(hand) and abs(float(total) - hand / 5) < 1e-5 * abs(hand)


def _backend(gpt, model, enabled: bool):
    """The backend's own loss code around a CPU model (no process groups beyond gloo's one rank: TP 1)."""
    from rlrun.train.megatron_backend import MegatronBackend
    b = MegatronBackend.__new__(MegatronBackend)
    b.cfg = NS(model=model, train=NS(mtp=NS(enabled=enabled, loss_scaling_factor=0.3)))
    b.model, b.tp_size, b.tp_group, b.tconfig = gpt, 1, None, NS(sequence_parallel=False)
    b.mtp_train = enabled
    return b


@pytest.mark.parametrize("enabled", [True, False])
def test_mtp_training_moves_only_what_it_should(megatron_cpu, enabled):
    """train.mtp.enabled: the backend's MTP term gives every MTP weight a gradient and an SGD step changes them;
    off: the MTP block is frozen (as MegatronBackend.init freezes it), not run, and its weights stay as loaded."""
    model = tiny("qwen2")
    _, _, gpt = _loaded(model)
    gpt.train()
    if not enabled:
        gpt.mtp.requires_grad_(False)
    before = {n: p.detach().clone() for n, p in gpt.named_parameters() if n.startswith("mtp.")}
    b = _backend(gpt, model, enabled)
    T = 10
    tokens = torch.randint(0, model.vocab_size, (1, T), generator=torch.Generator().manual_seed(4))
    rows = torch.arange(3, 9)
    x = {"logit_rows": rows, "targets": tokens[0, rows + 1], "loss_mask": torch.ones(6),
         "cu_seqlens": torch.tensor([0, T], dtype=torch.int32), "mtp_tokens": torch.tensor(6.0)}
    with b._mtp_running():
        out = _forward(gpt, tokens)
    assert isinstance(out, tuple) == enabled
    rl = out[0].sum() * 0.0 if enabled else out.sum() * 0.0  # a stand-in RL loss: the MTP term alone moves weights
    if enabled:
        loss, metric = b._with_mtp_loss(rl, out[1], x)
        assert float(loss) == pytest.approx(0.3 * float(metric)) and float(metric) > 0
    else:
        loss = rl
    loss.backward()
    params = [p for p in gpt.parameters() if p.requires_grad]
    torch.optim.SGD(params, lr=0.1).step()
    for n, p in gpt.named_parameters():
        if n.startswith("mtp."):
            assert (p.grad is not None and p.grad.abs().sum() > 0) == enabled, n
            assert torch.equal(p.detach(), before[n]) != enabled, n


def test_the_backends_train_step_path_adds_the_mtp_loss_on_a_packed_micro_batch(megatron_cpu, monkeypatch):
    """The backend's forward/backward of a train step (MegatronBackend._forward_backward: megatron-core's schedule,
    the output_processor hook, _policy_loss with the MTP term) on one packed micro-batch of two samples: the logged
    train/mtp_loss is the hand computation of the MTP layer's loss on the loss-masked response tokens, and every MTP
    weight gets a gradient. Needs megatron-core >= 0.19 (the hook the backend's forward uses)."""
    import inspect

    from megatron.core.models.gpt import GPTModel

    from rlrun.algo import AlgoParams
    from rlrun.config import load
    from rlrun.train.base import TrainBatch
    from rlrun.train.megatron.packing import pack
    from rlrun.train.step_metrics import StepSums
    if "output_processor" not in inspect.signature(GPTModel.forward).parameters:
        pytest.skip("megatron-core < 0.19: no output_processor hook (run with MEGATRON_CORE_PATH at 0.19.2's source)")
    zeros = torch.zeros  # megatron-core's schedule counts tokens in torch.zeros(..., device="cuda")
    monkeypatch.setattr(torch, "zeros", lambda *a, **k: zeros(*a, **(k | {"device": "cpu"} if "device" in k else k)))
    model = tiny("qwen2")
    _, _, gpt = _loaded(model)
    b = _backend(gpt, model, True)
    b.params, b.dp_size, b.graphs, b.replay_routers = AlgoParams.from_config(load([])), 1, None, []
    b.device, b.tp_rank = torch.device("cpu"), 0
    g = torch.Generator().manual_seed(5)
    tokens = [torch.randint(0, model.vocab_size, (n,), generator=g) for n in (11, 8)]
    starts = [4, 3]  # prompts of 4 and 3 tokens
    masks = [torch.tensor([1., 1, 0, 1, 1, 1, 1]), torch.tensor([1., 1, 1, 0, 1])]
    batch = TrainBatch(tokens=tokens, response_start=starts, loss_mask=masks,
                       advantages=[torch.ones(7), -torch.ones(5)])
    mb = pack(batch.tokens, batch.response_start, [0, 1], 1, b.device)
    mb.loss_inputs = b._loss_inputs(batch, mb, torch.tensor(2.0), torch.tensor(10.0))
    gpt.train()
    sums = StepSums(b.device)
    with b._mtp_running():
        b._forward_backward([mb], sums)
    assert not gpt.mtp_run  # only inside the train step
    for n, p in gpt.named_parameters():
        if n.startswith("mtp."):
            assert p.grad is not None and p.grad.abs().sum() > 0, n

    # by hand: the MTP hidden states of the packed row, the target of the response token at packed position p read
    # at row p - 2 (inside its sample), -log softmax over the vocabulary, loss-masked, over the 10 masked tokens
    with torch.no_grad():
        gpt.mtp_run = True
        _, (h,) = gpt(mb.tokens, mb.position_ids, attention_mask=None, packed_seq_params=mb.packed_seq_params())
        gpt.mtp_run = False
        logp = torch.log_softmax(h[:, 0] @ gpt.output_layer.weight.T, -1)
    hand, off = 0.0, 0
    for t, s, m in zip(tokens, starts, masks):
        for j, p in enumerate(range(s, t.numel())):
            if m[j] and p - 2 >= 0:
                hand -= float(logp[off + p - 2, t[p]])
        off += t.numel()
    got = float(sums.sums["train/mtp_loss"])
    assert abs(got - hand / 10) < 1e-5 * abs(hand / 10), (got, hand / 10)


# ---------------------------------------------------------------- rlrun validate
MIMO = ["model=qwen2.5-7b", "hardware=h100", "train.backend=megatron", "model.mtp_num_layers=1",
        "checkpoint.hf=/nowhere/MiMo-7B-RL", "train.mtp.enabled=true"]


_problems = config_problems


def test_mtp_validates_on_the_megatron_backend_and_refuses_what_cannot_work(tmp_path):
    assert _problems(MIMO) == {}
    cfg_problem = _problems([*MIMO, "train.backend=torch", "parallelism=tp1"])["train.backend"]
    assert "no multi-token prediction block" in cfg_problem.message and "train.backend=megatron" in cfg_problem.fix
    assert "model.mtp_num_layers" in _problems([*MIMO, "model.family=llama", "model.add_qkv_bias=false"])
    random = _problems([*MIMO, "checkpoint.hf=null", "checkpoint.random_init=true"])
    assert "checkpoint.hf is null" in random["model.mtp_num_layers"].message
    assert _problems(["model=qwen2.5-7b", "hardware=h100", "train.backend=megatron", "train.mtp.enabled=true",
                      "checkpoint.hf=/nowhere/x"])["train.mtp.enabled"].fix.startswith("set model.mtp_num_layers")
    assert "rollout.engine" in _problems([*MIMO, "rollout.engine=hf"])
    assert "model.lora freezes" in _problems([*MIMO, "model.lora.rank=8"])["train.mtp.enabled"].message
    graphs = [*MIMO, "train.cuda_graphs=true", "parallelism=tp1", "rollout.gpus_per_engine=1"]
    assert "MTP training is not captured" in _problems(graphs)["train.cuda_graphs"].message
    assert _problems([*graphs, "train.mtp.enabled=false"]) == {}
    # the MTP settings are rlrun's typed keys, not a second copy in train.megatron
    typed = _problems([*MIMO, "+train.megatron.mtp_num_layers=1", "+train.megatron.mtp_loss_scaling_factor=0.5"])
    assert typed["train.megatron.mtp_num_layers"].fix.endswith("set model.mtp_num_layers instead")
    assert typed["train.megatron.mtp_loss_scaling_factor"].fix.endswith("set train.mtp.loss_scaling_factor instead")
    # a checkpoint whose config.json has fewer MTP layers than asked
    import json
    from rlrun.train.hf_model import hf_config
    from rlrun.config import load
    m = load(MIMO[:-1] + ["model.mtp_num_layers=0"]).model
    (tmp_path / "config.json").write_text(json.dumps(hf_config(m).to_dict()))
    got = _problems([*MIMO, f"checkpoint.hf={tmp_path}"])
    assert got.keys() == {"model.mtp_num_layers"} and "at most 0" in got["model.mtp_num_layers"].message
    (tmp_path / "config.json").write_text(json.dumps(hf_config(m).to_dict() | {"num_nextn_predict_layers": 1}))
    assert _problems([*MIMO, f"checkpoint.hf={tmp_path}"]) == {}
