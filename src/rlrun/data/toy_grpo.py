"""A tiny pure-torch GRPO loop on the toy task: the learnability check behind the embedded default.

It uses the real pieces (rlrun.algo advantages and loss, the toy tokenizer, a random-init
transformers Qwen3ForCausalLM of the tiny shape) without Ray or an engine, so it measures only
whether and how fast a task is learnable. Run: `python -m rlrun.data.toy_grpo --task echo --lr 4e-3`.
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from rlrun.algo import AlgoParams, compute_advantages, compute_loss
from rlrun.data.toy import TOY_VOCAB_SIZE, build_toy_tokenizer, toy_dataset

TINY_SHAPE = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, vocab_size=TOY_VOCAB_SIZE, max_position_embeddings=64, tie_word_embeddings=True,
)


def build_tiny_model(tokenizer, seed: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(**TINY_SHAPE, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id)
    return Qwen3ForCausalLM(cfg)


def _left_pad(batch: list[list[int]], pad: int):
    width = max(map(len, batch))
    ids = torch.tensor([[pad] * (width - len(x)) + x for x in batch])
    attn = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in batch])
    return ids, attn


def _forward(model, ids, attn):
    pos = (attn.cumsum(-1) - 1).clamp_min(0)
    return model(input_ids=ids, attention_mask=attn, position_ids=pos).logits.float()


@torch.no_grad()
def sample(model, ids, attn, max_new_tokens: int, temperature: float, eos: int, pad: int, gen: torch.Generator):
    """Sample responses token by token (sequences are ~10 tokens, so no KV cache is needed)."""
    done = torch.zeros(ids.shape[0], dtype=torch.bool)
    out = []
    for _ in range(max_new_tokens):
        probs = torch.softmax(_forward(model, ids, attn)[:, -1] / temperature, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        out.append(nxt)
        ids = torch.cat([ids, nxt[:, None]], 1)
        attn = torch.cat([attn, (~done).long()[:, None]], 1)
        done |= nxt == eos
    resp = torch.stack(out, 1)
    # loss mask: every generated token up to and including the first <eos>
    mask = torch.cat([torch.ones_like(done[:, None]), (resp[:, :-1] != eos).cumprod(1).bool()], 1)
    return resp, mask & (resp != pad)


def run(task="echo", lr=4e-3, steps=40, prompts_per_step=8, n=8, seed=0, max_new_tokens=1, temperature=1.0,
        steps_per_rollout=1, log=print, rm_type="exact_match") -> list[float]:
    """GRPO for `steps` rollouts; returns the mean reward (rm_type) of each rollout.

    steps_per_rollout > 1 splits each rollout into that many optimizer steps (whole groups per
    mini-batch, PPO-clipped against the rollout-time log-probs), like train.num_steps_per_rollout.
    """
    from rlrun.reward import score

    tok = build_toy_tokenizer()
    model = build_tiny_model(tok, seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98))
    gen = torch.Generator().manual_seed(seed)
    data = toy_dataset(steps * prompts_per_step, seed, task)
    random.Random(seed).shuffle(data)
    params = AlgoParams(
        advantage_estimator="grpo", eps_clip=0.2, eps_clip_high=0.28, dual_clip_c=None, use_kl_loss=False,
        kl_loss_coef=0.0, kl_loss_type="low_var_kl", kl_coef=0.0, entropy_coef=0.0, use_tis=False, tis_clip=2.0,
        tis_clip_low=0.0, tis_level="token", tis_mode="truncate", use_opsm=False, opsm_delta=1e-4,
        opsm_reference="rollout", tis_reject_scope="pg", use_rs=False, rs_level="token", rs_clip_low=0.0, rs_clip=2.0,
        rs_veto_threshold=None, tis_batch_normalize=False, use_unbiased_kl=False, use_rollout_logprobs=False,
        calculate_per_token_loss=False, normalize_std=True, normalize_advantages=False,
        gamma=1.0, lambd=1.0, value_clip=0.2,
    )
    curve, t0 = [], time.time()
    for step in range(steps):
        rows = [r for r in data[step * prompts_per_step:(step + 1) * prompts_per_step] for _ in range(n)]
        ids, attn = _left_pad([tok(r["input"])["input_ids"] for r in rows], tok.pad_token_id)
        resp, mask = sample(model, ids, attn, max_new_tokens, temperature, tok.eos_token_id, tok.pad_token_id, gen)
        texts = tok.batch_decode(resp, skip_special_tokens=True)
        rewards = torch.tensor([score(rm_type, t, r["label"]) for t, r in zip(texts, rows)])
        adv, _ = compute_advantages("grpo", rewards, n, loss_mask=mask)
        full_ids = torch.cat([ids, resp], 1)
        full_attn = torch.cat([attn, mask.long()], 1)

        def response_logp(rows):
            logits = _forward(model, full_ids[rows], full_attn[rows])[:, ids.shape[1] - 1:-1] / temperature
            return torch.log_softmax(logits, -1).gather(-1, resp[rows][..., None]).squeeze(-1)

        with torch.no_grad():
            old_logp = response_logp(slice(None))
        for mb in torch.arange(len(rows)).chunk(steps_per_rollout):
            loss, _ = compute_loss(response_logp(mb), old_logp[mb], None, None, adv[mb], mask[mb], None, params)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        curve.append(rewards.mean().item())
        log(f"step {step:3d} reward {curve[-1]:.3f} t={time.time() - t0:.1f}s")
    return curve


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--task", default="echo")
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=1)
    ap.add_argument("--steps-per-rollout", type=int, default=1)
    ap.add_argument("--rm-type", default="exact_match")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    curve = run(a.task, a.lr, a.steps, a.prompts, a.n, a.seed, a.max_new_tokens, steps_per_rollout=a.steps_per_rollout,
                rm_type=a.rm_type)
    k = max(1, len(curve) // 4)
    print(f"task={a.task} lr={a.lr} first-{k} mean={sum(curve[:k]) / k:.3f} last-{k} mean={sum(curve[-k:]) / k:.3f}")


if __name__ == "__main__":
    main()
