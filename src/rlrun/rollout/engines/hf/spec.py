"""The hf engine kind's spec (pure: rlrun plan reads it). One device per engine, checksums of the weights it
holds (a push is verified against the trainer's fingerprint), memory per sequence it runs."""
from __future__ import annotations

from rlrun.config.kinds import ENGINES, EngineKind

SPEC = ENGINES.register(EngineKind("hf", needs_gpu=False, max_gpus_per_engine=1, checksums=True, lora=True,
                                   flattened_ipc=True, flattened_broadcast=True, memory="per_sequence", judge=True,
                                   prompt_logprobs=True,
                                   routed_experts=True, start="rlrun.rollout.engines.hf.engine:start"))
