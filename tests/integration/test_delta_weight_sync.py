"""rollout.weight_sync=delta end to end on the CPU: the transport's trainer end (write) publishes into a directory,
its engine end (receive) makes a real hf engine server process pull the version into its local checkpoint
(POST /pull_weights) and load it (/update_weights_from_disk), behind the real sglang-router. After each push the
engine holds the trainer's weights bit for bit, and a push that changes few weights writes a few hundred bytes.
(SGLang's end, the same pull run by rlrun's engine adapter on the engine's host before SGLang's own
/update_weights_from_disk: tests/gpu/test_sglang_delta_weight_sync.py on the lent GPU.)"""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from rlrun.rollout import weights as W
from rlrun.rollout.delta import FULL_FILE
from rlrun.rollout.engines.group import local_engine_group
from rlrun.rollout.tiny_model import build_model, save_tiny_model
from rlrun.rollout.transports import delta

pytestmark = pytest.mark.timeout(300)


def _bits(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k].view(torch.uint8),
                                                                                 b[k].view(torch.uint8)) for k in a)


@pytest.mark.parametrize("encoding", ["xor", "overwrite"])
def test_two_delta_pushes_bring_a_real_hf_engine_to_the_trainers_weights_bit_for_bit(tmp_path, encoding):
    model_dir = save_tiny_model(tmp_path / "tiny", seed=0)
    state = {n: t.detach().clone() for n, t in build_model(seed=7).state_dict().items()}
    name = "model.layers.0.mlp.down_proj.weight"
    state[name].zero_()
    args = {"encoding": encoding, "checksum": "xxh3-128", "dir": None, "local_dir": str(tmp_path / "host")}
    keep, pub = {}, str(tmp_path / "weight_sync")
    with local_engine_group(model_dir, 1, router="sglang_router", log_dir=tmp_path / "logs",
                            health_interval_s=5, startup_timeout_s=120) as group:
        url = group.urls[0]
        assert group.checksums() != {url: W.checksum(state)}  # the engine starts from other weights
        delta.write(state, pub, keep, **args)
        delta.receive(group, pub, "1", None, **args)
        first = keep["last"]
        assert group.checksums() == {url: W.checksum(state)} and group.versions() == {url: "1"}
        total = sum(t.numel() * t.element_size() for t in state.values())
        assert first["full"] == 1 and first["total_bytes"] == total and first["bytes"] > total

        state[name][0, :8] = 1.0  # 8 float32 zeros become 1.0 (0x3f800000): 2 changed bytes each
        delta.write(state, pub, keep, **args)
        delta.receive(group, pub, "2", None, **args)
        second = keep["last"]
        assert group.checksums() == {url: W.checksum(state)} and group.versions() == {url: "2"}
        assert _bits(load_file(str(tmp_path / "host" / FULL_FILE)), state)  # the local checkpoint, bit for bit
        # hand-counted: 16 changed bytes; the delta file (the compressed 84-byte overwrite payload or 16 nonzero
        # bytes of xor, under a safetensors header of less than 512 bytes) against the full version's whole state
        assert second["full"] == 0 and second["changed_bytes"] == 16
        assert second["bytes"] < 84 + 512 < total < first["bytes"]
