"""What the device offers that the megatron backend depends on (printed at the start of a call)."""
import inspect
import importlib.util

import torch

print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
try:
    from torch.nn.attention.varlen import varlen_attn
    print("varlen_attn", inspect.signature(varlen_attn))
except ImportError as e:
    print("varlen_attn: missing", e)
for mod in ("transformer_engine", "apex", "fused_weight_gradient_mlp_cuda", "flash_attn", "mbridge"):
    print(mod, "present" if importlib.util.find_spec(mod) else "absent")
try:  # mbridge builds through megatron-core's TE layer spec: does that work without TE?
    import os

    import transformers
    from mbridge import AutoBridge
    from megatron.core import parallel_state
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29544")
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    cfg = transformers.Qwen3Config(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                                   num_key_value_heads=4, head_dim=32, vocab_size=512)
    bridge = AutoBridge.from_config(cfg)
    model = bridge.get_model()
    print("mbridge get_model: OK", type(model))
except Exception as e:  # noqa: BLE001 - the probe reports whatever stops it
    print("mbridge get_model: FAILED", type(e).__name__, str(e)[:300])
finally:
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
