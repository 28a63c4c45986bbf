"""Loss masks end to end in the trainer backends (issue 17 point 3): masked tokens get exactly zero
gradient whatever their per-token inputs hold, TrainBatch.offpolicy_mask acts as the loss mask,
dynamic batching counts the whole sequence. The torch backend runs for real (tiny CPU model); the
megatron backend's loss path runs through its own _loss_inputs/_policy_loss with the CPU
linear_logp_entropy in place of megatron-core's model (tests/gpu/test_megatron_loss_mask.py
runs the real one)."""
import pytest
import torch

from train_fixtures import toy_batch, torch_backend
from rlrun.algo import AlgoParams
from rlrun.algo.token_stats import linear_logp_entropy
from rlrun.config import load
from rlrun.train.base import TrainBatch

ALGO = ["algo.use_tis=true", "algo.tis_level=sequence", "algo.tis_mode=mask", "algo.tis_clip_low=0.5",
        "algo.use_opsm=true", "algo.use_kl_loss=true", "algo.kl_loss_coef=0.1", "algo.entropy_coef=0.01"]
HOLES = [[1, 1, 0, 1], [0, 0, 0, 0, 0, 0], [1, 0, 1], [1, 1, 1, 0, 0, 1, 1]]  # sample 1: every token masked


def _with_inputs(batch: TrainBatch, logp: list[torch.Tensor]) -> TrainBatch:
    """old/ref/rollout log-probs near the policy's (seeded noise), masks with holes."""
    g = torch.Generator().manual_seed(1)
    near = lambda s: [x + s * torch.randn(x.shape, generator=g) for x in logp]  # noqa: E731
    return batch.with_(loss_mask=[torch.tensor(h, dtype=torch.float32) for h in HOLES], old_logp=near(0.02),
                       ref_logp=near(0.05), rollout_logp=near(0.1))


def _dirty(batch: TrainBatch) -> TrainBatch:
    """Garbage in every per-token input at the masked positions."""
    put = lambda xs, v: [torch.where(m > 0, x, torch.full_like(x, v)) for x, m in zip(xs, batch.loss_mask)]  # noqa: E731
    return batch.with_(advantages=put(batch.advantages, float("nan")), old_logp=put(batch.old_logp, 60.0),
                       ref_logp=put(batch.ref_logp, float("-inf")), rollout_logp=put(batch.rollout_logp, float("inf")))


def _step_grads(backend, batch: TrainBatch):
    """One train_step of the real backend, with the optimizer step replaced by a copy of the grads."""
    grads = {}

    def capture(model, opt, base_lr):
        grads.update({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        opt.zero_grad(set_to_none=True)
        return 0.0, base_lr

    backend._optimizer_step = capture
    return grads, backend.train_step(batch)


def _but_opsm_clipfrac(metrics: dict) -> dict:
    """Every metric but opsm_clipfrac, which counts (as slime's, slime/utils/ppo_utils.py) the negative advantages of
    loss-masked tokens too: the garbage put there moves it, by design (tests/unit/test_algo_offpolicy.py)."""
    return {k: v for k, v in metrics.items() if "opsm_clipfrac" not in k}


@pytest.mark.parametrize("per_token", ["false", "true"])
def test_torch_backend_masked_tokens_have_no_effect(per_token):
    b = torch_backend(*ALGO, f"train.calculate_per_token_loss={per_token}")
    base = toy_batch()
    batch = _with_inputs(base, b.compute_log_probs(base))
    g_clean, m_clean = _step_grads(b, batch)
    g_dirty, m_dirty = _step_grads(b, _dirty(batch))
    assert g_clean.keys() == g_dirty.keys() and all(torch.equal(g_clean[k], g_dirty[k]) for k in g_clean)
    assert _but_opsm_clipfrac(m_clean) == _but_opsm_clipfrac(m_dirty)
    assert sum(float(g.abs().sum()) for g in g_clean.values()) > 0
    # the holes matter: the same step with every token trained has another gradient
    g_full, _ = _step_grads(b, batch.with_(loss_mask=[torch.ones_like(m) for m in batch.loss_mask]))
    assert any(not torch.equal(g_clean[k], g_full[k]) for k in g_clean)
    # dynamic batching packs by the whole sequence, masked tokens included
    assert m_clean["train/response_tokens"] == sum(len(h) for h in HOLES)


def test_torch_backend_offpolicy_mask_is_the_loss_mask():
    b = torch_backend(*ALGO)
    base = toy_batch()
    batch = _with_inputs(base, b.compute_log_probs(base))
    holes = batch.loss_mask
    g_mask, m_mask = _step_grads(b, batch)
    ones = [torch.ones_like(m) for m in holes]
    g_off, m_off = _step_grads(b, batch.with_(loss_mask=ones, offpolicy_mask=holes))
    assert all(torch.equal(g_mask[k], g_off[k]) for k in g_mask)
    # 3 + 0 + 2 + 5 = 10 of the 4 + 6 + 3 + 7 = 20 response tokens stay: the off-policy mask removed 10
    assert m_off.pop("train/offpolicy_maskfrac") == pytest.approx(10 / 20)
    assert m_off == m_mask


def test_dynamic_batching_counts_masked_tokens():
    b = torch_backend("train.max_tokens_per_gpu=24")
    batch = toy_batch()
    holes = batch.with_(loss_mask=[torch.tensor(h, dtype=torch.float32) for h in HOLES])
    assert b._micro_batches(holes, 24) == b._micro_batches(batch, 24) == [[0, 3], [1, 2]]


def test_megatron_loss_path_masked_tokens_have_no_effect():
    # MegatronBackend._loss_inputs (the per-micro-batch tensors, padded to the CUDA-graph bucket) and
    # _policy_loss (compute_loss + policy_sums) as the backend runs them; the hidden states are leaves
    # and the output layer a random matrix, so each row's gradient is that token's alone.
    from rlrun.train.megatron.packing import bucket, pack
    from rlrun.train.megatron_backend import MegatronBackend

    cfg = load(ALGO)
    meg = object.__new__(MegatronBackend)  # no init(): no megatron-core on the CPU
    meg.device, meg.params, meg.model = torch.device("cpu"), AlgoParams.from_config(cfg), None
    g = torch.Generator().manual_seed(0)
    weight = 0.3 * torch.randn(50, 16, generator=g)

    def logp_entropy(model, hidden, rows, targets, entropy_grad):
        logp, ent = linear_logp_entropy(hidden[rows, 0], weight, targets)
        return logp, ent if entropy_grad else ent.detach()

    meg._response_logp_entropy = logp_entropy
    base = toy_batch()
    mb = bucket(pack(base.tokens, base.response_start, [0, 1, 2, 3], 1, meg.device), 16)
    hidden0 = torch.randn(int(mb.tokens.shape[1]), 1, 16, generator=g)
    with torch.no_grad():
        logp, _ = logp_entropy(None, hidden0, mb.logit_rows, mb.targets, False)
    cu = mb.response_cu.tolist()
    batch = _with_inputs(base, [logp[cu[k]:cu[k + 1]] for k in range(len(base))])

    def run(b: TrainBatch):
        hidden = hidden0.clone().requires_grad_(True)
        loss, sums = meg._policy_loss(hidden, meg._loss_inputs(b, mb, torch.tensor(3.0)))
        loss.backward()
        return hidden.grad[:, 0], {k: v.item() for k, v in sums.items()}

    grad, sums = run(batch)
    grad2, sums2 = run(_dirty(batch))
    assert torch.equal(grad, grad2) and _but_opsm_clipfrac(sums) == _but_opsm_clipfrac(sums2)
    trained = torch.zeros(grad.shape[0], dtype=torch.bool)
    trained[mb.logit_rows[:mb.response_tokens][torch.cat(batch.loss_mask) > 0]] = True
    assert torch.equal(grad[~trained], torch.zeros_like(grad[~trained]))  # masked, prompt and pad rows
    assert bool((grad[trained].abs().sum(-1) > 0).all())
    assert sums["tok/n"] == sum(map(sum, HOLES))  # the token count is over trained tokens only
