"""The megatron backend's sync-free rope and its SwiGLU kernel: pure tensor code, checked on the CPU
against transformers' rope, megatron-core's own unfused rope (where megatron-core is importable)
and a float64 SwiGLU (through Triton's interpreter where Triton is installed). The GPU parity tests
(tests/gpu/test_megatron_parity.py) check the whole models with these kernels on."""
import importlib.util

import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
from triton_interpreter import needs_triton, run_interpreted

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


@needs_triton
def test_swiglu_kernel_matches_float64_in_triton_interpreter():
    # fp32, because the interpreter truncates float32 -> bfloat16 where the GPU rounds to nearest.
    fwd_err, bwd_err = run_interpreted("""
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
    assert fwd_err < 1e-6 and bwd_err < 1e-6


def test_shard_sums_rebased_to_the_global_max_add_up_to_the_full_vocabulary():
    from rlrun.algo.token_stats import rebase
    torch.manual_seed(3)
    z = torch.randn(5, 40, dtype=torch.float64) * 4
    target = torch.tensor([0, 7, 20, 33, 39])

    def local_stats(zs, t, mine):  # what token_kernels.row_stats computes for one shard
        m = zs.amax(-1)
        e = (zs - m[:, None]).exp()
        return m, e.sum(-1), (e * (zs - m[:, None])).sum(-1), zs.gather(-1, t.clamp(0, zs.shape[1] - 1)[:, None])[:, 0] * mine

    m = z.amax(-1)
    parts = []
    for start in (0, 20):
        local = target - start
        mine = (local >= 0) & (local < 20)
        parts.append(rebase(*local_stats(z[:, start:start + 20], local, mine), m, mine))
    s, ez, t = (sum(p[i] for p in parts) for i in range(3))
    zm = z - m[:, None]
    torch.testing.assert_close(s, zm.exp().sum(-1))
    torch.testing.assert_close(ez, (zm.exp() * zm).sum(-1))
    torch.testing.assert_close(t, zm.gather(-1, target[:, None])[:, 0])


@needs_triton
def test_linear_logp_entropy_through_the_triton_kernels_matches_the_torch_path():
    errs = run_interpreted("""
        import torch
        from rlrun.algo import token_kernels, token_stats
        torch.manual_seed(0)
        hidden = torch.randn(37, 16, dtype=torch.float64).float().requires_grad_()
        weight = (torch.randn(5000, 16) * 0.3).requires_grad_()   # 5000: two kernel blocks, the second masked
        targets = torch.randint(0, 5000, (37,))
        g_logp, g_h = torch.randn(37), torch.randn(37)
        out = {}
        for fused in (False, True):
            token_kernels.available = lambda t, fused=fused: fused
            lp, h = token_stats.linear_logp_entropy(hidden, weight, targets, rows=16)
            gh, gw = torch.autograd.grad((lp * g_logp).sum() + (h * g_h).sum(), (hidden, weight))
            out[fused] = (lp, h, gh, gw)
        rel = lambda a, b: float((a - b).norm() / b.norm())
        print(*(rel(a, b) for a, b in zip(out[True], out[False])))
    """)
    assert len(errs) == 4 and max(errs) < 1e-5, errs
