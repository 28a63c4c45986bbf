"""FP8 rollout with bf16 training (rollout.fp8) on the real SGLang (0.5.16): the engine starts from the block-wise
FP8 HF dir rlrun writes (rlrun.rollout.fp8.write_fp8_dir: e4m3 weights + weight_scale_inv, quantization_config
weight_block_size [128, 128]) and takes the trainer's bf16 state through the push that quantizes each bucket on the
GPU (rlrun.launch.train_group.push_state(fp8=True), the run's tensor transport and flattened form).

  1. SGLang serves the FP8 dir: its log-probs against transformers' bf16 log-probs of the same model (the mismatch
     FP8 adds, measured on SGLang's own checkpoint loader);
  2. the same bf16 state pushed through the quantizing push lands in exactly the parameters the loader filled: every
     parameter's checksum from SGLang's /weights_checker (srt/utils/weight_checker.py: a hash of each parameter, of
     the dequantized weight for a block-FP8 one) is unchanged, and greedy output and log-probs of a cold request (the
     radix cache flushed first) are those of a cold request before the push;
  3. a new bf16 state pushed: every linear weight's and the embedding's checksum changes, and SGLang's log-probs
     follow it (gap against transformers' bf16 log-probs of the new model within FP8_TOL, against the old model's far
     larger), and the push's bytes against the bf16 state's.

Why step 2 compares cold requests: SGLang's checkpoint load and /update_weights_from_tensor both end in the model's
load_weights (srt/model_loader/loader.py DefaultModelLoader.load_weights_and_postprocess;
srt/model_executor/model_runner_components/weight_updater.py update_weights_from_tensor /
_update_weights_from_flattened_bucket), and the load's one extra step, Fp8LinearMethod.process_weights_after_loading
(srt/layers/quantization/fp8.py process_weights_after_loading_block_quant), changes nothing on Hopper: its UE8M0
requantization (fp8_utils.requant_block_scale_ue8m0_for_deepgemm) runs only where
deep_gemm_wrapper.DEEPGEMM_SCALE_UE8M0 (= DEEPGEMM_BLACKWELL, srt/layers/deep_gemm_wrapper/configurer.py) holds, and
the float32 weight_scale_inv is then read as loaded (Fp8LinearMethod.apply). So the same bytes pushed are the same
parameters, which the checksums show directly. A request whose prompt SGLang finds in its radix cache is computed
differently: the first 7 prompt tokens' KV come from the cache (schedule_batch.Req._compute_max_prefix_len) and only
the last token is extended over them, while after a push (which flushes the cache) the whole prompt is prefilled.
The two attention paths round differently in bf16, and FP8's per-token activation quantization (1 x 128 groups,
e4m3's 2^-3 relative step) turns those last-bit differences into rounding flips: log-probs move by a fraction of the
FP8-vs-bf16 mismatch. The first H200 run of this test compared a cached-prefix request before the push with a cold
one after it and measured 3.7e-2; step 2 now compares like with like and prints that path difference (`path`) too.

FP8_TOL: e4m3 keeps 3 mantissa bits, so each weight and (SGLang quantizes activations per 1 x 128 group on the fly)
each activation entering a linear layer is off by up to 2^-4 relative, about 2.5% RMS; over the 28 linear layers'
random errors the logits (std ~0.02 x sqrt(1024) ~ 0.6 here) move by a few percent, i.e. a few hundredths of a nat
per logit and ~0.1 at most over a dozen tokens; 0.3 is 3x that (bf16 alone: 0.03, test_sglang_engine). A weight
that did not land (a scale left at its init, a bf16 tensor read as fp8) moves log-probs by whole nats. SAME_TOL: the
same parameters serving the same cold request at batch size 1 run the same kernels on the same shapes (none of them
reduces with atomics), so none is expected; the run-to-run spread of two cold requests before the push (`noise`) is
asserted within it too, so that a failure says which of the two moved.

Model: a random Qwen3-0.6B shape cut to 4 layers (q 16 x 128, kv 8 x 128, MLP 3072: multiples of SGLang's 128-row
blocks) with the toy tokenizer's 64-token vocabulary, bf16.

Run on the lent GPU with the kit staged (tools/device/sglang.sh, ITEMS=fp8); skips without CUDA or SGLang."""
import importlib.util
import time

import pytest
import requests
import torch

from test_sglang_engine import TEST_ARGS, _generate, _hf_logprobs, _model, _save

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                                 reason="needs SGLang 0.5.16 (tools/device/stage.sh with the kit in .sgl/)"),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

FP8_TOL = 0.3  # see the module docstring
SAME_TOL = 1e-3
PROMPT = [5, 6, 7, 8, 9, 10, 11, 12]


def _cfg(tmp):
    from rlrun.config import load

    return load(["hardware=h100", "model=qwen3-0.6b", "model.num_layers=4", "model.vocab_size=64",
                 "checkpoint.random_init=true", "rollout.engine=sglang", "rollout.fp8=true", "train.gpus_per_node=1",
                 "rollout.offload=true", "rollout.mem_fraction_static=0.3", f"run.output_dir={tmp}", *TEST_ARGS,
                 # DeepGEMM (SGLang's `auto` FP8 GEMM on Hopper) compiles the shapes this test uses on first use instead
                 # of warming 2,560 batch sizes per GEMM at start: 178 s of a 202 s start on a fresh machine
                 # (docs/benchmarks.md, "Tenth session"); what is served is the same kernels
                 "+hardware.env.SGLANG_JIT_DEEPGEMM_PRECOMPILE='0'"])


def _served(url, greedy=False):
    out = _generate(url, PROMPT, 16, **({"temperature": 0.0} if greedy else {}))
    pairs = out["meta_info"]["output_token_logprobs"]
    return [lp for lp, _tok, _ in pairs], [tok for _lp, tok, _ in pairs]


def _cold(url):
    """A greedy request with the radix cache flushed first: the whole prompt prefilled, as after a push."""
    from rlrun.rollout.engines.http import flush

    for _ in range(20):  # SGLang flushes only a fully idle engine: the last request may still be leaving it
        if flush(url):
            return _served(url, greedy=True)
        time.sleep(0.5)
    raise AssertionError(f"{url} never became idle enough to flush its radix cache")


def _moved(a, b):
    return max(abs(x - y) for x, y in zip(a[0], b[0]))


def _checksums(url):
    """SGLang's /weights_checker checksum of every parameter (one TP rank here), by SGLang's parameter name."""
    r = requests.post(f"{url}/weights_checker", json={"action": "checksum"}, timeout=120)
    body = r.json()
    assert r.status_code == 200 and body["success"], body
    (rank,) = body["ranks"]
    return rank["checksums"]


def _gap(url, model):
    got, ids = _served(url)
    want = _hf_logprobs(model, PROMPT, ids)
    return max(abs(a - b) for a, b in zip(got, want))


def _push(cfg, url, model, version):
    from rlrun.config.kinds import ENGINES, TRANSPORTS
    from rlrun.launch.train_group import push_state

    state = {n: p.detach() for n, p in model.state_dict().items()}
    out = push_state(state, [url], transport="tensor", version=version,
                     bucket_bytes=cfg.rollout.weight_sync_bucket_mb << 20, engine_dtype=None,
                     device=torch.device("cuda", 0), copies=1, tied=("lm_head.weight",),
                     flattened=TRANSPORTS["tensor"].flattened(ENGINES["sglang"]), fp8=True)
    assert requests.get(f"{url}/model_info", timeout=30).json()["weight_version"] == version
    bf16 = sum(t.numel() * t.element_size() for n, t in state.items() if n != "lm_head.weight")
    return out, bf16


def test_sglang_serves_the_fp8_dir_and_takes_quantized_pushes(tmp_path):
    from rlrun.rollout.engines.sglang.engine import SGLangEngine
    from rlrun.rollout.fp8 import is_fp8_dir, write_fp8_dir

    cfg = _cfg(tmp_path)
    m0 = _save(cfg, 0, tmp_path / "m0")  # bf16, as the trainer holds it
    fp8_dir = write_fp8_dir(tmp_path / "m0", tmp_path / "m0_fp8")
    assert is_fp8_dir(fp8_dir)
    # the dir (quantized on the CPU) and the push (on the GPU) hold the same bytes: step 2 compares like with like
    from safetensors.torch import load_file

    from rlrun.rollout.fp8 import quantize_blockwise, quantizes

    written = load_file(f"{fp8_dir}/model.safetensors")
    for name, w in m0.state_dict().items():
        if quantizes(name, w):
            q, scale = quantize_blockwise(w)
            assert torch.equal(q.view(torch.uint8).cpu(), written[name].view(torch.uint8)), name
            assert torch.equal(scale.cpu(), written[name + "_scale_inv"]), name
    torch.cuda.empty_cache()
    engine = SGLangEngine.from_config(cfg, rank=0, gpus=[0], log_dir=tmp_path, model_path=fp8_dir)
    engine.start(timeout_s=420)
    try:
        gap_init = _gap(engine.url, m0)  # a cold request: the engine's first
        warm = _served(engine.url, greedy=True)  # the prompt's first 7 tokens from the radix cache gap_init left
        before, again = _cold(engine.url), _cold(engine.url)
        noise, path = _moved(before, again), _moved(warm, before)
        loaded = _checksums(engine.url)
        out, bf16 = _push(cfg, engine.url, m0, "1")
        pushed = _checksums(engine.url)
        changed = sorted(n for n in loaded.keys() | pushed.keys() if loaded.get(n) != pushed.get(n))
        after = _cold(engine.url)
        same = _moved(before, after)
        print(f"SGLANG FP8 dir: max |logprob - transformers bf16| = {gap_init:.4f}; the same state pushed "
              f"({out['bytes'] / 1e6:.1f} MB FP8 vs {bf16 / 1e6:.1f} MB bf16, {out['seconds']:.3f} s): "
              f"{len(changed)} of {len(loaded)} parameter checksums changed, greedy ids "
              f"{'equal' if before[1] == after[1] else 'DIFFER'}, max |logprob change| (cold vs cold) = {same:.2e}; "
              f"two cold requests before the push: {noise:.2e}; the radix-cache path vs a cold prefill on the same "
              f"weights: {path:.2e}")
        assert gap_init < FP8_TOL
        assert not changed, f"the push of the loaded bytes changed these parameters: {changed}"
        assert noise <= SAME_TOL
        assert before[1] == after[1] and same <= SAME_TOL
        m1 = _model(cfg, 1)
        out, _ = _push(cfg, engine.url, m1, "2")
        new = _checksums(engine.url)
        # every linear layer and the embedding hold new values (the norms' random init is all ones in both models)
        linear = {n for n in loaded if n.endswith("_proj.weight")} | {"model.embed_tokens.weight"}
        assert len(linear) == 4 * cfg.model.num_layers + 1 and all(new[n] != loaded[n] for n in linear)
        gap_new, gap_old = _gap(engine.url, m1), _gap(engine.url, m0)
        print(f"SGLANG after the FP8 push of a new state: max |logprob - transformers bf16| = {gap_new:.4f} "
              f"(against the old state: {gap_old:.4f}; tolerance {FP8_TOL})")
        assert gap_new < FP8_TOL < gap_old
    finally:
        engine.stop()
