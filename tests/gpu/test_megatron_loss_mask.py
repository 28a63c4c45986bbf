"""Loss masks in the real megatron backend on one GPU (issue 17 point 3): a train step whose masked
tokens hold garbage (NaN advantages, +-inf and huge log-probs) gives the same gradients and metrics
as the clean step, with the rollout correction (slime MIS's rejection stage, veto and batch
normalisation too), OPSM, the (unbiased) KL loss and the entropy term all on;
TrainBatch.offpolicy_mask acts as the loss mask. Eager and CUDA-graph micro-batches.

The optimizer step is replaced by a no-op, so every step starts from the same weights and its
gradient stays in the DDP's main_grad buffers to be read. GPU kernels may sum in another order
from run to run, so the bound for "the same" is the difference between two clean steps.
"""
import pytest
import torch

OVERRIDES = ["model=tiny", "hardware=h100", "train.backend=megatron", "train.gradient_accumulation_fusion=false",
             "rollout.max_response_len=64", "eval.max_response_len=64", "train.max_tokens_per_gpu=96",
             "train.log_probs_max_tokens_per_gpu=96", "algo.use_tis=true", "algo.tis_level=sequence",
             "algo.tis_mode=mask", "algo.tis_clip_low=0.5", "algo.use_opsm=true", "algo.use_kl_loss=true",
             "algo.kl_loss_coef=0.1", "algo.entropy_coef=0.01",
             # slime MIS (issue 28): a geometric rejection stage with the veto, batch-normalised weights, rejected
             # tokens out of every term, the unbiased KL
             "algo.use_rs=true", "algo.rs_level=geometric", "algo.rs_veto_threshold=1e-4",
             "algo.tis_batch_normalize=true", "algo.tis_reject_scope=all", "algo.use_unbiased_kl=true"]


@pytest.fixture(scope="module", params=["false", "true"], ids=["eager", "cuda_graphs"])
def meg(request):
    from rlrun.config import load
    from rlrun.train.megatron_backend import MegatronBackend
    b = MegatronBackend(load(OVERRIDES + [f"train.cuda_graphs={request.param}"]), rank=0, world_size=1, gpu_id=0,
                        total_steps=10)
    b.init()
    b.opt.step = lambda: (True, 0.0, None)  # keep the weights: every step sees the same model
    yield b
    b.shutdown()


def _batch(meg):
    from rlrun.train.base import TrainBatch
    g = torch.Generator().manual_seed(0)
    lens = [int(x) for x in torch.randint(12, 40, (6,), generator=g)]
    starts = [int(x) for x in torch.randint(3, 10, (6,), generator=g)]
    tokens = [torch.randint(0, meg.cfg.model.vocab_size, (n,), generator=g) for n in lens]
    masks = [(torch.rand(n - s, generator=g) > 0.3).float() for n, s in zip(lens, starts)]
    masks[1].zero_()  # a sample with every token masked
    adv = [torch.full((n - s,), float(torch.randn(1, generator=g))) for n, s in zip(lens, starts)]
    b = TrainBatch(tokens=tokens, response_start=starts, loss_mask=masks, advantages=adv)
    logp = meg.compute_log_probs(b)
    near = lambda s: [x + s * torch.randn(x.shape, generator=g) for x in logp]  # noqa: E731
    return b.with_(old_logp=near(0.02), ref_logp=near(0.05), rollout_logp=near(0.1))


def _dirty(b):
    put = lambda xs, v: [torch.where(m > 0, x, torch.full_like(x, v)) for x, m in zip(xs, b.loss_mask)]  # noqa: E731
    return b.with_(advantages=put(b.advantages, float("nan")), old_logp=put(b.old_logp, 60.0),
                   ref_logp=put(b.ref_logp, float("-inf")), rollout_logp=put(b.rollout_logp, float("inf")))


def _step(meg, b):
    m = meg.train_step(b)
    return torch.cat([p.main_grad.float().reshape(-1) for p in meg.model.parameters()]), m


def test_masked_tokens_have_no_effect(meg):
    b = _batch(meg)
    g1, m1 = _step(meg, b)
    g2, _ = _step(meg, b)
    gd, md = _step(meg, _dirty(b))
    noise = (g2 - g1).abs().max().item()
    print(f"LOSSMASK grad norm {g1.norm().item():.4e} run-to-run {noise:.3e} dirty {(gd - g1).abs().max().item():.3e}")
    assert torch.isfinite(gd).all() and g1.norm() > 0
    assert (gd - g1).abs().max().item() <= noise
    assert md["train/loss"] == pytest.approx(m1["train/loss"], rel=1e-5, abs=1e-6)  # fp32 sums of a few hundred terms


def test_offpolicy_mask_is_the_loss_mask(meg):
    b = _batch(meg)
    g1, m1 = _step(meg, b)
    g2, _ = _step(meg, b)
    go, mo = _step(meg, b.with_(loss_mask=[torch.ones_like(m) for m in b.loss_mask], offpolicy_mask=b.loss_mask))
    noise = (g2 - g1).abs().max().item()
    assert (go - g1).abs().max().item() <= noise
    kept = sum(float(m.sum()) for m in b.loss_mask)
    total = sum(m.numel() for m in b.loss_mask)
    assert mo["train/offpolicy_maskfrac"] == pytest.approx(1 - kept / total)
    assert mo["train/loss"] == pytest.approx(m1["train/loss"], rel=1e-5, abs=1e-6)
