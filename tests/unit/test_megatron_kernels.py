"""The megatron backend's sync-free rope and its SwiGLU kernel: pure tensor code, checked on the CPU
against transformers' rope, megatron-core's own unfused rope (where megatron-core is importable)
and a float64 SwiGLU (through Triton's interpreter where Triton is installed). The GPU parity tests
(tests/gpu/test_megatron_parity.py) check the whole models with these kernels on."""
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from rlrun.train.megatron import rope


def _angles(max_len: int, rot: int, interleaved: bool = False) -> torch.Tensor:
    """megatron-core's table layout: [max_len, 1, 1, rot], halves repeated (or pairs interleaved)."""
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    f = torch.outer(torch.arange(max_len, dtype=torch.float64), inv)
    emb = torch.repeat_interleave(f, 2, dim=-1) if interleaved else torch.cat((f, f), dim=-1)
    return emb.float()[:, None, None, :]


def test_positions_restart_at_every_sequence():
    cu = torch.tensor([0, 3, 7, 8], dtype=torch.int32)
    assert rope._positions(cu, 8).tolist() == [0, 1, 2, 0, 1, 2, 3, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_thd_rope_matches_transformers_per_sequence(dtype):
    torch.manual_seed(0)
    lens, heads, d = [5, 1, 9, 3], 4, 16
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    t = torch.randn(sum(lens), heads, d, dtype=dtype)
    freqs = _angles(max(lens), d)
    out = rope.apply_thd(t, cu, freqs)
    start = 0
    for n in lens:
        q = t[start:start + n].transpose(0, 1)[None]  # [1, heads, n, d], transformers' layout
        cos, sin = (f(freqs[:n, 0, 0]).to(dtype)[None] for f in (torch.cos, torch.sin))
        ref, _ = apply_rotary_pos_emb(q, q, cos, sin)
        torch.testing.assert_close(out[start:start + n], ref[0].transpose(0, 1), rtol=0, atol=0)
        start += n


def test_partial_rotary_leaves_the_tail_and_bshd_equals_one_packed_sequence():
    torch.manual_seed(1)
    t = torch.randn(6, 1, 2, 8)  # [s, b, heads, d], rope over the first 4 dims
    freqs = _angles(6, 4)
    out = rope.apply_bshd(t, freqs)
    assert torch.equal(out[..., 4:], t[..., 4:])
    thd = rope.apply_thd(t[:, 0], torch.tensor([0, 6], dtype=torch.int32), freqs)
    assert torch.equal(out[:, 0], thd)
    assert not torch.allclose(out[1:, ..., :4], t[1:, ..., :4])  # positions > 0 rotate


def test_cos_sin_are_computed_once_per_table_and_packing():
    freqs, cu = _angles(8, 4), torch.tensor([0, 3, 8], dtype=torch.int32)
    first = rope._CACHE.get(freqs, cu, torch.float32, 8)
    assert rope._CACHE.get(freqs, cu, torch.float32, 8) is first
    assert rope._CACHE.get(freqs, cu.clone(), torch.float32, 8) is not first  # a new micro-batch


@pytest.mark.skipif(importlib.util.find_spec("megatron") is None, reason="needs megatron-core (Python >= 3.12)")
@pytest.mark.parametrize("interleaved", [False, True])
def test_thd_rope_equals_megatron_core_unfused(interleaved):
    from megatron.core.models.common.embeddings import rope_utils

    class OneRank:  # the cp group megatron-core asks for: size 1
        def size(self):
            return 1

        def rank(self):
            return 0
    torch.manual_seed(2)
    cu = torch.tensor([0, 4, 11, 12], dtype=torch.int32)
    t = torch.randn(12, 3, 8)
    freqs = _angles(7, 6, interleaved)  # partial: 6 of 8 dims
    ref = rope_utils._apply_rotary_pos_emb_thd(t, cu, freqs, rotary_interleaved=interleaved, cp_group=OneRank())
    torch.testing.assert_close(rope.apply_thd(t, cu, freqs, interleaved=interleaved), ref, rtol=0, atol=0)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs Triton (its interpreter runs on the CPU)")
def test_swiglu_kernel_matches_float64_in_triton_interpreter():
    # TRITON_INTERPRET must be set before Triton is imported: a fresh interpreter. fp32, because the
    # interpreter truncates float32 -> bfloat16 where the GPU rounds to nearest.
    code = textwrap.dedent("""
        import torch
        from rlrun.train.megatron import kernels
        fwd, bwd = kernels._triton_swiglu()
        torch.manual_seed(0)
        n = 1500  # two column blocks, the second one masked
        x, dy = torch.randn(3, 2 * n), torch.randn(3, n)
        y, dx = torch.full((3, n), float("nan")), torch.full((3, 2 * n), float("nan"))
        fwd[(3, 2)](x, y, n, BLOCK=1024)
        bwd[(3, 2)](x, dy, dx, n, BLOCK=1024)
        x64 = x.double().requires_grad_()
        y64 = kernels.swiglu_reference(x64)
        y64.backward(dy.double())
        rel = lambda a, b: float((a.double() - b).norm() / b.norm())
        print(rel(y, y64.detach()), rel(dx, x64.grad))
    """)
    src = str(Path(rope.__file__).parents[3])
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([src] + sys.path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    fwd_err, bwd_err = map(float, out.stdout.split())
    assert fwd_err < 1e-6 and bwd_err < 1e-6
