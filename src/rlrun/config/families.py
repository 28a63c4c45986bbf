"""Model families: what each `model.family` means in a Hugging Face config.json and which trainer backends
build it. One registry, read by the schema (the allowed names), the HF check (hfcheck.py: a key the family's
config.json lacks means the transformers default of that family, not False), the family rules (a
backend that does not build the family is a config problem, not a runtime error) and the backends
(rlrun.train.hf_model reads `hf_config`, rlrun.train.megatron.model `interleaved_rope`). Adding a dense
family of the llama layout (RMSNorm, gated SiLU MLP, rotary attention) is one entry here.
Pure Python: `rlrun plan` imports it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Family:
    model_type: str                          # config.json's "model_type"
    backends: tuple[str, ...]                # train.backend values that build it
    # model.* values the architecture hard-wires (transformers' modeling code builds them so, whatever
    # config.json says or omits): e.g. Qwen2's q/k/v projections always have a bias
    fixed: dict[str, Any] = field(default_factory=dict)
    moe: bool = False
    mla: bool = False
    # the backends among `backends` whose runner trains it today (None: all of them); the others plan and
    # export it only, and rlrun.config.capability refuses to run it there, saying `why_not`
    trained_by: tuple[str, ...] | None = None
    why_not: str = ""
    # the transformers config class (the torch backend and the hf engine build it; rlrun.train.hf_model) and
    # the architecture name written to config.json; None: no transformers mapping (not built by torch)
    hf_config: str | None = None
    # the rope flavour megatron-core must use to match the HF implementation (rlrun.train.megatron.model);
    # None: not built by the megatron backend
    interleaved_rope: bool | None = None
    # its HF checkpoint names the linear layers q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj one by
    # one: the names rlrun.rollout.fp8 quantizes for rollout.fp8 (a family with fused qkv_proj / gate_up_proj names,
    # phi3 and glm4's MLP, would be pushed in bf16 into the engine's FP8 parameters)
    fp8_names: bool = False
    # how its HF checkpoints name multi-token prediction layers (model.mtp_num_layers; rlrun.train.megatron.weights):
    # "nextn" = DeepSeek-V3's model.layers.{num_layers + i} with eh_proj / enorm / hnorm / shared_head.norm, "mimo" =
    # MiMo's model.mtp_layers.{i} with input_proj / token_layernorm / hidden_layernorm / final_layernorm; None: its
    # checkpoints carry none
    mtp_names: str | None = None

    @property
    def hf_arch(self) -> str:
        return f"{self.hf_config[:-len('Config')]}ForCausalLM" if self.hf_config else ""

    @property
    def trains(self) -> tuple[str, ...]:
        return self.backends if self.trained_by is None else self.trained_by


BOTH = ("torch", "megatron")
FAMILIES: dict[str, Family] = {
    "qwen3": Family("qwen3", BOTH, {"qk_layernorm": True, "post_norms": False}, hf_config="Qwen3Config",
                    interleaved_rope=False, fp8_names=True),
    "qwen3_moe": Family("qwen3_moe", BOTH, {"qk_layernorm": True, "post_norms": False}, moe=True,
                        hf_config="Qwen3MoeConfig", interleaved_rope=False, fp8_names=True),
    "llama": Family("llama", BOTH, {"qk_layernorm": False, "post_norms": False}, hf_config="LlamaConfig",
                    interleaved_rope=False, fp8_names=True),
    "glm4": Family("glm4", BOTH, {"qk_layernorm": False, "post_norms": True}, hf_config="Glm4Config",
                   interleaved_rope=True),
    # Qwen2 / Qwen2.5: the llama layout with a bias on q/k/v (no attention_bias key in config.json)
    # (MiMo-7B is this layout plus MiMo's MTP layers: slime imports it as Qwen2 with --mtp-num-layers)
    "qwen2": Family("qwen2", BOTH, {"qk_layernorm": False, "add_qkv_bias": True, "post_norms": False},
                    hf_config="Qwen2Config", interleaved_rope=False, fp8_names=True, mtp_names="mimo"),
    "mistral": Family("mistral", BOTH, {"qk_layernorm": False, "add_qkv_bias": False, "post_norms": False},
                      hf_config="MistralConfig", interleaved_rope=False, fp8_names=True),
    # Phi-3 stores q/k/v and gate/up fused (qkv_proj, gate_up_proj); rlrun's megatron mapping reads the
    # split llama names, so only the torch backend (transformers' Phi3ForCausalLM) builds it
    "phi3": Family("phi3", ("torch",), {"qk_layernorm": False, "add_qkv_bias": False, "post_norms": False},
                   hf_config="Phi3Config"),
    # MLA + MoE (DeepSeek-V3/R1, Moonlight, Kimi-K2): megatron-core's MLASelfAttention and sigmoid router with the
    # expert bias (rlrun.train.megatron.model); transformers' DeepseekV3Config gives the random-init weights' shapes
    # (the torch backend does not train it: its MoE/MLA layers are not wired there)
    "deepseek_v3": Family("deepseek_v3", ("megatron",), {"qk_layernorm": True, "post_norms": False},
                          moe=True, mla=True, hf_config="DeepseekV3Config", interleaved_rope=False,
                          mtp_names="nextn"),
}
NAMES = tuple(FAMILIES)
BY_MODEL_TYPE = {f.model_type: name for name, f in FAMILIES.items()}
