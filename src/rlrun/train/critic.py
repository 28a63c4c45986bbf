"""The PPO critic of the torch backend: the policy's architecture with a scalar value head.

As in slime (model_provider, role "critic"): the transformer of the actor's checkpoint
(`checkpoint.hf`, else the same random init under `run.seed`) with its LM head replaced by
Linear(hidden, 1) with bias, weight ~ N(0, 0.02) and zero bias. It lives on the actor's device
(slime: "PPO implies a critic on the actor's GPUs") with its own AdamW optimizer.

A value is read at the same positions as the log-probs: the value of response token t is the
head's output at the position that predicts t (the state before t is generated).
"""
from __future__ import annotations

import torch
from torch import nn

from rlrun.train.hf_model import build_causal_lm

HEAD_INIT_STD = 0.02  # slime's LinearForLastLayer init


class ValueModel(nn.Module):
    def __init__(self, backbone: nn.Module, hidden_size: int, seed: int):
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1, bias=True)
        g = torch.Generator().manual_seed(seed)  # same head on every DP rank, no broadcast needed
        with torch.no_grad():
            self.value_head.weight.copy_(torch.randn(self.value_head.weight.shape, generator=g) * HEAD_INIT_STD)
            self.value_head.bias.zero_()

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """[1, T] ids -> [1, T] values (float32)."""
        hidden = self.backbone(input_ids=input_ids, position_ids=position_ids, use_cache=False).last_hidden_state
        return self.value_head(hidden).float()[..., 0]


def build_value_model(model_cfg, hf_path: str | None, seed: int) -> ValueModel:
    """The critic: the causal LM's transformer (without its LM head) plus the value head."""
    lm = build_causal_lm(model_cfg, hf_path, seed)
    lm.config.use_cache = False
    return ValueModel(lm.base_model, lm.config.hidden_size, seed)
