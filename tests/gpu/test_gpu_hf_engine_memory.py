"""The hf engine's /release_memory_occupation frees its GPU memory and /resume_memory_occupation
restores the exact state (issue 6 §4, colocated training). The CPU half of these checks is
tests/unit/test_hf_engine_memory.py; here the weights really leave and return to the GPU.

Model: a random-init Qwen3 with 0.6B's layer shapes but 8 layers (bf16, ~0.45 GB of weights,
about 300 MB of it the 151936 x 1024 embedding), so the freed amount is far above allocator noise.
"""
import requests
import torch

from rlrun.rollout.hf_engine import HFEngine
from rlrun.rollout.hf_server import ThreadedServer

SEEDED = dict(input_ids=[3, 4, 5, 6], sampling_params={"max_new_tokens": 16, "sampling_seed": 5, "ignore_eos": True,
                                                       "temperature": 1.0}, return_logprob=True)


def _engine():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rlrun.rollout.tiny_model import build_tokenizer
    cfg = Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).cuda()
    return HFEngine(model, build_tokenizer(), seed=0)


def test_release_frees_gpu_memory_and_resume_restores_state():
    engine = _engine()
    srv = ThreadedServer(engine)
    url = srv.start()
    try:
        def post(path, **body):
            r = requests.post(f"{url}{path}", json=body, timeout=120)
            assert r.status_code == 200, r.text
            return r

        def allocated():
            return requests.get(f"{url}/server_info", timeout=30).json()["memory_allocated_bytes"]

        weight_bytes = sum(p.numel() * p.element_size() for p in engine.model.parameters())
        before = post("/generate", **SEEDED).json()
        held = allocated()
        post("/release_memory_occupation")
        released = allocated()
        assert next(engine.model.parameters()).device.type == "cpu"
        r = requests.post(f"{url}/generate", json=SEEDED, timeout=30)
        assert r.status_code == 400 and "/resume_memory_occupation" in r.json()["error"]["message"]
        post("/resume_memory_occupation")
        after = post("/generate", **SEEDED).json()
        print(f"MEMORY weights {weight_bytes / 2**20:.0f} MiB: allocated {held / 2**20:.0f} MiB -> released "
              f"{released / 2**20:.0f} MiB -> resumed {allocated() / 2**20:.0f} MiB; same tokens "
              f"{after['output_ids'] == before['output_ids']}")
        assert held - released >= 0.95 * weight_bytes
        assert next(engine.model.parameters()).device.type == "cuda"
        assert after["output_ids"] == before["output_ids"]
        assert after["meta_info"]["output_token_logprobs"] == before["meta_info"]["output_token_logprobs"]
    finally:
        srv.stop()
        engine.shutdown()
