"""logp_and_entropy: one softmax for both, against autograd through the textbook formulas;
vocab sharded over 2 gloo ranks equals the unsharded result."""
import pytest
import torch
import torch.distributed as dist

from gloo_ranks import run_on_gloo_ranks
from rlrun.algo import entropy_from_logits
from rlrun.algo import token_stats
from rlrun.algo.token_stats import logp_and_entropy


def _reference(z, t):
    zf = z.float()
    return torch.log_softmax(zf, -1).gather(-1, t[:, None])[:, 0], entropy_from_logits(zf)


def _case(seed=0, n=7, v=11, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(n, v, generator=g) * 3).to(dtype)
    t = torch.randint(0, v, (n,), generator=g)
    return z, t, torch.randn(n, generator=g), torch.randn(n, generator=g)


def _same_values_then_backward(got, want, a, b, use):
    """Asserts both (logp, entropy) pairs agree, then backpropagates the same weighted loss of the
    terms `use` names through each, for the caller to compare the gradients."""
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=1e-5)
    for lp, h in (got, want):
        {"both": (a * lp).sum() + (b * h).sum(), "logp": (a * lp).sum(), "entropy": (b * h).sum()}[use].backward()


def test_hand_computed_uniform_logits():
    # equal logits over 4 tokens: log p = -log 4 for any target, entropy = log 4
    lp, h = logp_and_entropy(torch.zeros(2, 4), torch.tensor([0, 3]))
    assert lp.tolist() == pytest.approx([-1.3862944] * 2) and h.tolist() == pytest.approx([1.3862944] * 2)


@pytest.mark.parametrize("use", ["both", "logp", "entropy"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_values_and_gradients_match_autograd(use, dtype, monkeypatch):
    monkeypatch.setattr(token_stats, "_CHUNK", 3)  # several chunks, the last one short
    z, t, a, b = _case(dtype=dtype)
    z1, z2 = z.clone().requires_grad_(), z.clone().requires_grad_()
    _same_values_then_backward(logp_and_entropy(z1, t), _reference(z2, t), a, b, use)
    assert z1.grad.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(z1.grad.float(), z2.grad.float(), atol=tol, rtol=tol)


def _worker(rank, out):
    z, t, a, b = _case(seed=3, n=5, v=10)
    shard = z[:, rank * 5:(rank + 1) * 5].clone().requires_grad_()
    lp, h = logp_and_entropy(shard, t, vocab_start=rank * 5, group=dist.group.WORLD)
    ((a * lp).sum() + (b * h).sum()).backward()
    out[rank] = (lp.tolist(), h.tolist(), shard.grad.tolist())


def test_vocab_sharded_over_two_ranks_equals_unsharded():
    out = run_on_gloo_ranks(_worker)
    z, t, a, b = _case(seed=3, n=5, v=10)
    z = z.requires_grad_()
    lp, h = _reference(z, t)
    ((a * lp).sum() + (b * h).sum()).backward()
    for rank in (0, 1):
        assert out[rank][0] == pytest.approx(lp.tolist(), abs=1e-5)
        assert out[rank][1] == pytest.approx(h.tolist(), abs=1e-5)
        torch.testing.assert_close(torch.tensor(out[rank][2]), z.grad[:, rank * 5:(rank + 1) * 5], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_entropy_equals_the_formula(dtype, monkeypatch):
    monkeypatch.setattr(token_stats, "_CHUNK", 3)
    z, _, _, _ = _case(seed=5, dtype=dtype)
    torch.testing.assert_close(token_stats.entropy(z), entropy_from_logits(z.float()), atol=1e-5, rtol=1e-5)


def _entropy_worker(rank, out):
    z, _, _, _ = _case(seed=4, n=5, v=10)
    out[rank] = token_stats.entropy(z[:, rank * 5:(rank + 1) * 5], group=dist.group.WORLD).tolist()


def test_chunked_entropy_vocab_sharded_over_two_ranks():
    out = run_on_gloo_ranks(_entropy_worker)
    z, _, _, _ = _case(seed=4, n=5, v=10)
    for rank in (0, 1):
        assert out[rank] == pytest.approx(entropy_from_logits(z).tolist(), abs=1e-5)


def _linear_case(seed=0, n=7, d=6, v=11):
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(n, d, generator=g), torch.randn(v, d, generator=g)
    return x, w, torch.randint(0, v, (n,), generator=g), torch.randn(n, generator=g), torch.randn(n, generator=g)


@pytest.mark.parametrize("use", ["both", "logp", "entropy"])
def test_linear_logp_entropy_matches_autograd_through_the_logits(use):
    x, w, t, a, b = _linear_case()
    x1, w1, x2, w2 = (u.clone().requires_grad_() for u in (x, w, x, w))
    got = token_stats.linear_logp_entropy(x1, w1, t, rows=3)  # 3 chunks, the last one short
    _same_values_then_backward(got, _reference(x2 @ w2.t(), t), a, b, use)
    torch.testing.assert_close(x1.grad, x2.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w1.grad, w2.grad, atol=1e-5, rtol=1e-5)


def test_linear_logp_entropy_frozen_weight_gets_no_grad_and_the_same_hidden_grad():
    """A frozen output layer (model.lora without it in modules_to_save): no weight gradient is computed, the
    hidden states' gradient is the one a trainable weight gives."""
    x, w, t, a, b = _linear_case(seed=3)
    x1, x2, w2 = x.clone().requires_grad_(), x.clone().requires_grad_(), w.clone().requires_grad_()
    lp1, h1 = token_stats.linear_logp_entropy(x1, w, t, rows=3)
    lp2, h2 = token_stats.linear_logp_entropy(x2, w2, t, rows=3)
    ((lp1 * a).sum() + (h1 * b).sum()).backward()
    ((lp2 * a).sum() + (h2 * b).sum()).backward()
    assert w.grad is None and w2.grad is not None
    torch.testing.assert_close(x1.grad, x2.grad, atol=0, rtol=0)


def test_linear_logp_entropy_without_grad_keeps_nothing():
    x, w, t, _, _ = _linear_case(seed=1)
    with torch.no_grad():
        lp, h = token_stats.linear_logp_entropy(x, w, t, rows=2)
    ref_lp, ref_h = _reference(x @ w.t(), t)
    assert lp.grad_fn is None and torch.allclose(lp, ref_lp, atol=1e-5) and torch.allclose(h, ref_h, atol=1e-5)


def _linear_worker(rank, out):
    x, w, t, a, b = _linear_case(seed=2, n=5, v=10)
    x = x.requires_grad_()
    shard = w[rank * 5:(rank + 1) * 5].clone().requires_grad_()
    lp, h = token_stats.linear_logp_entropy(x, shard, t, vocab_start=rank * 5, group=dist.group.WORLD, rows=2)
    ((a * lp).sum() + (b * h).sum()).backward()
    out[rank] = (lp.tolist(), h.tolist(), x.grad.tolist(), shard.grad.tolist())


def test_linear_logp_entropy_vocab_sharded_over_two_ranks_equals_unsharded():
    out = run_on_gloo_ranks(_linear_worker)
    x, w, t, a, b = _linear_case(seed=2, n=5, v=10)
    x, w = x.requires_grad_(), w.requires_grad_()
    lp, h = _reference(x @ w.t(), t)
    ((a * lp).sum() + (b * h).sum()).backward()
    for rank in (0, 1):
        assert out[rank][0] == pytest.approx(lp.tolist(), abs=1e-5)
        assert out[rank][1] == pytest.approx(h.tolist(), abs=1e-5)
        torch.testing.assert_close(torch.tensor(out[rank][3]), w.grad[rank * 5:(rank + 1) * 5], atol=1e-5, rtol=1e-5)
    # each rank's hidden grad is its shard's part; the TP region of the caller sums them
    torch.testing.assert_close(torch.tensor(out[0][2]) + torch.tensor(out[1][2]), x.grad, atol=1e-5, rtol=1e-5)
