"""Block-wise FP8 e4m3 quantization of a weight sync (rlrun.rollout.fp8): the round trip stays within the bound
e4m3's 3 mantissa bits give (module docstring of rlrun.rollout.fp8), one scale per 128 x 128 block, and the
names an FP8 engine loads (slime's quantizer_fp8.py list, `weight_scale_inv`)."""
from __future__ import annotations

import pytest
import torch

from rlrun.rollout.fp8 import E4M3_MAX, dequantize_blockwise, quantize_blockwise, quantize_named, quantizes


def test_round_trip_error_is_within_half_an_e4m3_ulp():
    g = torch.Generator().manual_seed(0)
    # 300 x 200: partial edge blocks; one block scaled 1000x larger, so that blocks need their own scales
    w = torch.randn(300, 200, generator=g) * 0.02
    w[:128, :128] *= 1000.0
    q, scale = quantize_blockwise(w)
    assert q.dtype == torch.float8_e4m3fn and q.shape == w.shape and scale.shape == (3, 2)
    assert torch.allclose(scale[0, 0], w[:128, :128].abs().max() / E4M3_MAX)
    back = dequantize_blockwise(q, scale)
    per_elem_scale = scale.repeat_interleave(128, 0)[:300].repeat_interleave(128, 1)[:, :200]
    bound = torch.maximum(w.abs() * 2.0 ** -4, per_elem_scale * 2.0 ** -10)
    err = (back - w).abs()
    assert (err <= bound * (1 + 1e-6)).all()
    # and the bound is not loose: rounding uses most of it somewhere (relative error near 2^-4 = 0.0625)
    rel = (err / w.abs().clamp(min=1e-30))[w.abs() > per_elem_scale * 2.0 ** -6]
    assert rel.max() > 0.05
    # each block's largest value maps to e4m3's largest (448) exactly
    assert q.float()[:128, :128].abs().max().item() == E4M3_MAX


def test_only_linear_weights_are_quantized_with_their_scales():
    named = [("model.embed_tokens.weight", torch.randn(64, 32)),
             ("model.layers.0.self_attn.q_proj.weight", torch.randn(32, 32)),
             ("model.layers.0.input_layernorm.weight", torch.ones(32)),
             ("model.layers.0.mlp.gate.weight", torch.randn(8, 32)),
             ("model.layers.0.mlp.experts.3.down_proj.weight", torch.randn(32, 16)),
             ("lm_head.weight", torch.randn(64, 32))]
    out = dict(quantize_named(named))
    assert list(out) == ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                         "model.layers.0.self_attn.q_proj.weight_scale_inv", "model.layers.0.input_layernorm.weight",
                         "model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.3.down_proj.weight",
                         "model.layers.0.mlp.experts.3.down_proj.weight_scale_inv", "lm_head.weight"]
    assert out["model.layers.0.mlp.experts.3.down_proj.weight"].dtype == torch.float8_e4m3fn
    assert out["model.layers.0.mlp.experts.3.down_proj.weight_scale_inv"].shape == (1, 1)
    assert out["model.layers.0.mlp.gate.weight"].dtype == torch.float32  # the router stays in the training dtype


def test_the_memory_estimate_counts_what_the_quantize_step_quantizes():
    """rlrun.config.memory.engine_weight_bytes with rollout.fp8: 1 B/param (+ a float32 scale per 128 x 128 block)
    for exactly the tensors quantize_named quantizes in the transformers model of the same model.* section (built
    on the meta device), 2 B for the rest."""
    import math

    from rlrun.config import load
    from rlrun.config.memory import engine_weight_bytes
    from rlrun.config.params import count_params
    from rlrun.rollout.fp8 import quantizes
    from rlrun.train.hf_model import hf_config

    import transformers
    for model in ("tiny-moe", "qwen3-4b"):
        m = load(["hardware=cpu", f"model={model}"]).model
        with torch.device("meta"):
            hf = transformers.AutoModelForCausalLM.from_config(hf_config(m))
        quantized = kept = 0
        for name, p in hf.named_parameters():
            if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
                quantized += p.numel()  # fused in memory; per-expert *_proj.weight on the wire (checkpoint_names)
            elif quantizes(name, p):
                quantized += p.numel()
            else:
                kept += p.numel()
        pc = count_params(m)
        assert quantized + kept == pc.total
        want = 2 * kept + quantized + 4 * quantized / 128 ** 2
        assert math.isclose(engine_weight_bytes(m, pc, fp8=True), want, rel_tol=1e-12), model
        assert engine_weight_bytes(m, pc, fp8=False) == 2 * pc.total
        assert engine_weight_bytes(m, pc, fp8=True) < 0.6 * 2 * pc.total or model == "tiny-moe"


def test_validate_refuses_fp8_rollout_where_it_cannot_work():
    import pytest

    from rlrun.config import ConfigError, load

    def problems(*overrides):
        with pytest.raises(ConfigError) as e:
            load(["rollout.fp8=true", *overrides])
        return [p.message for p in e.value.problems if p.path == "rollout.fp8"]

    cpu = problems("hardware=cpu")  # the hf engine on hardware without FP8
    assert any("no FP8 matrix units" in m for m in cpu) and any("engine=hf does not serve FP8" in m for m in cpu)
    gpu_hf = problems("hardware=h100", "rollout.engine=hf", "model=qwen3-4b", "checkpoint.hf=/m")
    assert any("engine=hf does not serve FP8" in m for m in gpu_hf) and not any("FP8 matrix" in m for m in gpu_hf)
    sglang = ["hardware=h100", "rollout.engine=sglang", "model=qwen3-4b", "checkpoint.hf=/m"]
    # Blackwell (UE8M0 scales) and ROCm (e4m3fnuz): SGLang re-encodes what it loads, a push would not
    assert any("hardware.fp8_push is false" in m for m in problems(*sglang[1:], "hardware=b200"))
    assert any("hardware.fp8_push is false" in m for m in problems(*sglang[1:], "hardware=mi300x"))
    # the disk transport writes bf16; a MoE model's expert push is unverified; fused names are not quantized
    disk = problems(*sglang, "train.colocate=true", "train.num_nodes=2", "cluster.num_nodes=2")
    assert any("weight_sync=disk" in m for m in disk)
    assert any("MoE model" in m for m in problems(*sglang[:2], "model=qwen3-30b-a3b", "checkpoint.hf=/m"))
    assert any("family=phi3" in m for m in problems(*sglang[:2], "model=phi-3-mini", "checkpoint.hf=/m"))
    # SGLang's 128-row blocks per TP rank: Qwen3-4B's MLP (9728) splits into 8 x 1216, not a multiple of 128
    tp8 = problems(*sglang, "rollout.gpus_per_engine=8")
    assert tp8 == ["SGLang's block-wise FP8 layers need every part of a fused projection to be a multiple of 128 rows "
                   "on each tensor-parallel rank (tp 8); not so for the MLP (ffn_hidden_size): 1216"]


def test_validate_accepts_fp8_rollout_on_hopper_with_sglang():
    from rlrun.config import load

    for hw in ("h100", "h200"):
        for tp in (1, 2, 4):  # 9728 / 4 = 2432 = 19 x 128; 8 heads of 128 per kv projection
            cfg = load(["rollout.fp8=true", f"hardware={hw}", "rollout.engine=sglang", "model=qwen3-4b",
                        "checkpoint.hf=/m", f"rollout.gpus_per_engine={tp}"])
            assert cfg.rollout.fp8 and cfg.hardware.fp8_push


# A random Qwen3 whose projections SGLang's FP8 layers take (q 4 x 32, kv 4 x 32, MLP 256: multiples of 128), in
# whole 128 x 128 blocks as real checkpoints are: transformers' FP8 reader takes the block size from the scale grid
# (weight rows / scale rows), which a partial block would mislead (partial blocks: the round-trip test above)
FP8_SHAPE = ["model=tiny", "model.hidden_size=256", "model.num_attention_heads=4", "model.num_query_groups=4",
             "model.head_dim=32", "model.ffn_hidden_size=256"]


def _fp8_cfg(*extra):
    from rlrun.config import load

    return load(["hardware=h100", "rollout.engine=sglang", "rollout.fp8=true", *FP8_SHAPE, *extra])


def _bound(w, scale):
    """The module docstring's bound per element: max(2^-4 |w|, 2^-10 * its block's scale)."""
    n, k = w.shape
    per = scale.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    return torch.maximum(w.abs() * 2.0 ** -4, per * 2.0 ** -10) * (1 + 1e-6)


def test_the_fp8_dir_writer_streams_a_bf16_checkpoint_into_the_form_sglang_loads(tmp_path):
    """checkpoint.hf (bf16, two shards) -> the engines' FP8 dir: every linear weight float8_e4m3fn with its
    weight_scale_inv [ceil(N/128), ceil(K/128)] float32, the rest unchanged, config.json's quantization_config,
    the tokenizer copied, the index naming each tensor's shard; the round trip within the docstring's bound; and
    transformers (its FineGrainedFP8 loader, which dequantizes on a machine without an FP8 GPU) reads the dir back
    to the same dequantized weights."""
    import json

    import transformers
    from safetensors import safe_open

    from rlrun.config.memory import FP8_QUANT_CONFIG
    from rlrun.data.toy import build_toy_tokenizer
    from rlrun.rollout.fp8 import is_fp8_dir, quantizes, write_fp8_dir
    from rlrun.train.hf_model import build_causal_lm

    cfg = _fp8_cfg()
    model = build_causal_lm(cfg.model, None, 3, dtype=torch.bfloat16)
    src = tmp_path / "bf16"
    model.save_pretrained(src, max_shard_size="200KB")  # ~0.5 MB of weights: several shards
    build_toy_tokenizer().save_pretrained(src)
    shards = sorted(p.name for p in src.glob("*.safetensors"))
    assert len(shards) >= 2 and not is_fp8_dir(src)
    out = tmp_path / "fp8"
    assert write_fp8_dir(src, out) == str(out) and is_fp8_dir(out)
    assert sorted(p.name for p in out.glob("*.safetensors")) == shards
    hf = json.loads((out / "config.json").read_text())
    assert hf["quantization_config"] == FP8_QUANT_CONFIG == {"quant_method": "fp8", "fmt": "e4m3",
                                                             "activation_scheme": "dynamic",
                                                             "weight_block_size": [128, 128]}
    assert (out / "tokenizer_config.json").is_file()
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    written = {}
    for shard in shards:
        with safe_open(str(out / shard), framework="pt") as f:
            for name in f.keys():
                assert index[name] == shard
                written[name] = f.get_tensor(name)
    state = model.state_dict()
    linear = [n for n, t in state.items() if quantizes(n, t)]
    assert len(linear) == 7 * cfg.model.num_layers
    assert set(written) == {n for n in state if n != "lm_head.weight"} | {n + "_scale_inv" for n in linear}
    for name, t in state.items():
        if name == "lm_head.weight":
            continue  # tied: save_pretrained writes the embedding only
        if name in linear:
            q, scale = written[name], written[name + "_scale_inv"]
            assert q.dtype == torch.float8_e4m3fn and q.shape == t.shape and scale.dtype == torch.float32
            assert scale.shape == (-(-t.shape[0] // 128), -(-t.shape[1] // 128))
            back = dequantize_blockwise(q, scale)
            assert ((back - t.float()).abs() <= _bound(t.float(), scale)).all(), name
        else:
            assert written[name].dtype == t.dtype and torch.equal(written[name], t), name
    # transformers' own reader of FP8 block-wise checkpoints (dequantized here, no FP8 GPU: fp8 times its block's
    # scale in float32, rounded once to the model's bf16), bit for bit
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).state_dict()
    for name in linear:
        want = dequantize_blockwise(written[name], written[name + "_scale_inv"], dtype=torch.bfloat16)
        assert torch.equal(loaded[name], want), name


def test_the_random_init_is_converted_in_place_for_the_engines(tmp_path):
    """rlrun.runner.write_engine_init_dir with rollout.fp8 and no checkpoint.hf: the random init the trainer builds
    too (same seed), written and converted in place; with a bf16 checkpoint.hf: its FP8 copy beside it in the run
    dir (engine_init_fp8), the checkpoint itself untouched (the trainer reads it)."""
    from safetensors import safe_open

    from rlrun.data.toy import build_toy_tokenizer
    from rlrun.rollout.fp8 import is_fp8_dir
    from rlrun.runner import write_engine_init_dir
    from rlrun.train.hf_model import build_causal_lm

    cfg = _fp8_cfg()
    out = write_engine_init_dir(cfg, build_toy_tokenizer(), tmp_path / "engine_init")
    assert out == str(tmp_path / "engine_init") and is_fp8_dir(out)
    assert not list((tmp_path / "engine_init").glob("*.tmp"))
    ref = build_causal_lm(cfg.model, None, cfg.run.seed).state_dict()
    name = "model.layers.1.mlp.down_proj.weight"
    with safe_open(f"{out}/model.safetensors", framework="pt") as f:
        q, scale = f.get_tensor(name), f.get_tensor(name + "_scale_inv")
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (2, 2)  # [256, 256]: blocks 2 x 2
    w = ref[name].float()
    assert ((dequantize_blockwise(q, scale) - w).abs() <= _bound(w, scale)).all()
    src = tmp_path / "bf16"
    build_causal_lm(cfg.model, None, 0, dtype=torch.bfloat16).save_pretrained(src)
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    run_dir = tmp_path / "run"
    copy = write_engine_init_dir(_fp8_cfg(f"checkpoint.hf={src}"), build_toy_tokenizer(), run_dir / "engine_init")
    assert copy == str(run_dir / "engine_init_fp8") and is_fp8_dir(copy) and not is_fp8_dir(src)
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before


def test_the_random_init_is_written_in_the_trainers_dtype_on_a_gpu(tmp_path):
    """On a GPU the engines' random init is the trainer's init rounded to bf16 (what the Megatron trainer holds), with
    config dtype bfloat16, so SGLang's dtype=auto serves bf16; a float32 config made it serve float16. On the CPU
    the dir stays float32 (the hf engine and the torch trainer run float32 there)."""
    import json

    from safetensors.torch import load_file

    from rlrun.config import load
    from rlrun.data.toy import build_toy_tokenizer
    from rlrun.runner import write_engine_init_dir
    from rlrun.train.hf_model import build_causal_lm

    for hw, want in (("h100", torch.bfloat16), ("cpu", torch.float32)):
        cfg = load([f"hardware={hw}", *FP8_SHAPE])
        out = write_engine_init_dir(cfg, build_toy_tokenizer(), tmp_path / hw)
        written = load_file(f"{out}/model.safetensors")
        assert json.loads((tmp_path / hw / "config.json").read_text())["dtype"] == str(want).removeprefix("torch.")
        ref = build_causal_lm(cfg.model, None, cfg.run.seed).state_dict()
        assert {t.dtype for t in written.values()} == {want}
        for name, t in written.items():
            assert torch.equal(t, ref[name].to(want)), name


def test_the_fp8_push_quantizes_each_bucket_and_fingerprints_what_was_sent():
    """push_state(fp8=True) (the lead trainer rank's push): each bucket, as the transport asks for it, holds every
    linear weight as float8_e4m3fn followed by its weight_scale_inv and everything else unchanged; no bucket exceeds
    bucket_bytes; the tied lm_head is not sent; the bytes and the fingerprint are those of the sent tensors. The
    transport here records the buckets instead of reaching SGLang (which needs a GPU: tests/gpu/test_sglang_fp8.py
    pushes the same stream into it)."""
    from rlrun.config.kinds import TransportKind
    from rlrun.launch.train_group import push_state
    from rlrun.rollout import weights as W
    from rlrun.train.hf_model import build_causal_lm

    cfg = _fp8_cfg()
    state = {n: t.detach() for n, t in build_causal_lm(cfg.model, None, 5, dtype=torch.bfloat16).state_dict().items()}
    bucket_bytes = 96 << 10  # 96 KiB: the 128 KiB MLP weights get buckets of their own (a larger tensor may)
    sent = []

    def record(named, urls, *, bucket_bytes, prepare, **how):
        for bucket in W.as_buckets(named, bucket_bytes):
            sent.append(prepare(bucket))
        return sum(t.numel() * t.element_size() for b in sent for _, t in b)

    transport = TransportKind("recording", auto=lambda cfg: False, rules=lambda cfg: iter(()), push=record)
    out = push_state(dict(state), ["http://engine"], transport=transport, version=1, bucket_bytes=bucket_bytes,
                     engine_dtype=None, device=torch.device("cpu"), tied=("lm_head.weight",), fp8=True)
    got = [n for b in sent for n, _ in b]
    flat = dict(kv for b in sent for kv in b)
    assert len(got) == len(flat)
    want = []
    for name, t in state.items():
        if name == "lm_head.weight":
            continue
        want.append(name)
        if quantizes(name, t):
            want.append(name + "_scale_inv")
            q, scale = quantize_blockwise(t)
            assert flat[name].dtype == torch.float8_e4m3fn and torch.equal(flat[name].view(torch.uint8),
                                                                          q.view(torch.uint8))
            assert torch.equal(flat[name + "_scale_inv"], scale)
        else:
            assert flat[name].dtype == torch.bfloat16 and torch.equal(flat[name], t)
    assert sorted(got) == sorted(want)
    for b in sent:  # a weight and its scale travel together, and a bucket stays within bucket_bytes
        names = [n for n, _ in b]
        assert all(n.removesuffix("_scale_inv") in names for n in names)
        assert len(b) == 1 or sum(t.numel() * t.element_size() for _, t in b) <= bucket_bytes
    assert out["bytes"] == sum(t.numel() * t.element_size() for t in flat.values())
    assert out["bytes"] < 0.6 * sum(t.numel() * t.element_size() for n, t in state.items() if n != "lm_head.weight") \
        + 2 * state["model.embed_tokens.weight"].numel()
    # the fingerprint: of the sent (FP8) tensors plus the tied lm_head as the engine holds it, not of the bf16 state
    tied = {"lm_head.weight": state["lm_head.weight"]}
    assert out["fingerprint"] == W.fingerprint({**flat, **tied})
    assert out["fingerprint"] != W.fingerprint(state)


def test_the_preflight_finds_room_for_the_fp8_copy_of_a_bf16_checkpoint(tmp_path, monkeypatch):
    """rollout.fp8 with a bf16 checkpoint.hf: its FP8 copy (engine_weight_bytes(fp8=True)) must fit under
    run.output_dir. A quantized checkpoint.hf is refused whatever rollout.fp8 says: the trainer reads it (megatron's
    HF load would take its FP8 values without their scales)."""
    from rlrun.config.memory import engine_weight_bytes
    from rlrun.config.params import count_params
    from rlrun.data.toy import build_toy_tokenizer
    from rlrun.launch import preflight as pf
    from rlrun.rollout.fp8 import write_fp8_dir
    from rlrun.train.hf_model import build_causal_lm

    src = tmp_path / "bf16"
    cfg = _fp8_cfg()
    build_causal_lm(cfg.model, None, 0, dtype=torch.bfloat16).save_pretrained(src)
    build_toy_tokenizer().save_pretrained(src)
    cfg = _fp8_cfg(f"checkpoint.hf={src}", f"run.output_dir={tmp_path / 'runs'}")
    need = int(engine_weight_bytes(cfg.model, count_params(cfg.model), fp8=True))
    free = {"free": need - 1}
    monkeypatch.setattr(pf.shutil, "disk_usage", lambda p: type("U", (), free)())
    problems = list(pf.fp8_engine_init(cfg, None))
    assert [p.path for p in problems] == ["run.output_dir"] and "FP8 copy" in problems[0].message
    free["free"] = need
    assert list(pf.fp8_engine_init(cfg, None)) == []
    assert list(pf.quantized_checkpoint(cfg, None)) == []
    fp8_dir = write_fp8_dir(src, tmp_path / "fp8")
    for fp8 in ("true", "false"):
        quantized = _fp8_cfg(f"checkpoint.hf={fp8_dir}", f"rollout.fp8={fp8}")
        problems = list(pf.quantized_checkpoint(quantized, None))
        assert [p.path for p in problems] == ["checkpoint.hf"] and "quant_method='fp8'" in problems[0].message
        assert list(pf.fp8_engine_init(quantized, None)) == []  # reported once, by quantized_checkpoint


@pytest.mark.parametrize("flattened", [False, True], ids=["per_tensor", "flattened_bucket"])
def test_the_fp8_push_hands_the_engine_the_fp8_dir_s_tensors_through_the_tensor_transport(tmp_path, flattened):
    """SGLang's checkpoint load and its /update_weights_from_tensor end in the same model.load_weights (0.5.16:
    srt/model_loader/loader.py DefaultModelLoader.load_weights_and_postprocess; srt/model_executor/
    model_runner_components/weight_updater.py update_weights_from_tensor), and on Hopper the load's extra
    Fp8LinearMethod.process_weights_after_loading leaves block-FP8 weights and float32 scales as loaded (docs/rollout.md
    "FP8 weights for the rollout"), so a push is right when it hands load_weights what the FP8 dir holds. Here the
    whole push runs as a run's does, over the real tensor transport (shared memory on the CPU where CUDA IPC on a
    GPU) in both of its forms: one handle per tensor (what SGLang got before 2026-11-29, when EngineKind.flattened_ipc
    was off for it)
    and SGLang's flattened_bucket, to a stand-in engine that records each request and reads each payload as the hf
    engine does (rlrun.rollout.weights.deserialize_named_tensors: for a flattened bucket the slicing of SGLang's
    FlattenedTensorBucket.reconstruct_tensors). What it receives equals write_fp8_dir's safetensors name for name,
    dtype, shape and byte; the requests come as pause (in place) -> one update per bucket -> continue, the last update
    alone carrying the version and the cache flush. The stand-in replaces SGLang, which needs a GPU; the real engine
    takes the same push in tests/gpu/test_sglang_fp8.py, which compares SGLang's own checksums of its parameters
    before and after it."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from safetensors.torch import load_file

    from rlrun.launch.train_group import push_state
    from rlrun.rollout import weights as W
    from rlrun.rollout.fp8 import write_fp8_dir
    from rlrun.train.hf_model import build_causal_lm

    cfg = _fp8_cfg()
    model = build_causal_lm(cfg.model, None, 11, dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "bf16")
    want = load_file(f"{write_fp8_dir(tmp_path / 'bf16', tmp_path / 'fp8')}/model.safetensors")
    calls, got = [], {}

    class Engine(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            if self.path == "/update_weights_from_tensor":
                (payload,) = body.pop("serialized_named_tensors")  # one TP rank: one payload
                names = []
                for name, t in W.deserialize_named_tensors(payload, body["load_format"]):
                    assert name not in got, f"{name} sent twice"
                    got[name] = t.clone()  # the sender frees the buffer once the engines answered
                    names.append(name)
                body["names"] = names
            calls.append((self.path, body))
            data = json.dumps({"success": True, "message": "Success"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        state = {n: t.detach() for n, t in model.state_dict().items()}
        bucket_bytes = 96 << 10  # several buckets (~0.5 MB of bf16 weights)
        out = push_state(state, [f"http://127.0.0.1:{server.server_address[1]}"], transport="tensor", version="3",
                         bucket_bytes=bucket_bytes, engine_dtype=None, device=torch.device("cpu"),
                         tied=("lm_head.weight",), flattened=flattened, fp8=True)
    finally:
        server.shutdown()
        server.server_close()
    assert sorted(got) == sorted(want)  # the dir holds no lm_head (tied): the push sends none either
    for name, t in want.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape, name
        assert torch.equal(got[name].contiguous().view(torch.uint8), t.contiguous().view(torch.uint8)), name
    assert {t.dtype for t in want.values()} == {torch.float8_e4m3fn, torch.float32, torch.bfloat16}
    paths = [p for p, _ in calls]
    updates = [b for p, b in calls if p == "/update_weights_from_tensor"]
    assert len(updates) >= 3 and paths == ["/pause_generation", *["/update_weights_from_tensor"] * len(updates),
                                           "/continue_generation"]
    assert calls[0][1]["mode"] == "in_place"
    assert all(b["load_format"] == (W.FLATTENED_BUCKET if flattened else None) for b in updates)
    assert [(b["weight_version"], b["flush_cache"]) for b in updates] == [(None, False)] * (len(updates) - 1) + [("3", True)]
    for b in updates:  # each weight travels with its scale, in one load_weights call
        assert all(n.removesuffix("_scale_inv") in b["names"] for n in b["names"])
    assert out["bytes"] == sum(t.numel() * t.element_size() for t in want.values())
