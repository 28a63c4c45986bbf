"""Batched autoregressive generation with a KV cache for any transformers causal LM.

Semantics follow SGLang's sampler (sglang/srt/layers/sampler.py, standard path) so that rollout
log-probs mean the same thing on both engines:
  - greedy (temperature < 1e-6): argmax; logprob = log_softmax(logits)
  - sampling: probs = softmax(logits / T); top-k, then top-p filter the probs for *sampling only*;
    the returned logprob is log(probs[token]) of the temperature-scaled, *unfiltered*
    distribution. At T = 1 this equals the trainer's log_softmax(logits), which is what slime's
    rollout/trainer log-prob mismatch metric and TIS compare against.
Each request owns a torch.Generator (seeded by sampling_seed or by the engine's seed stream) so
that its samples do not depend on which other requests share its batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from rlrun.rollout.api import SamplingParams, finish_reason


@dataclass
class Sequence:
    rid: str
    prompt_ids: list[int]
    sampling: SamplingParams
    generator: torch.Generator
    return_logprob: bool = False
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: dict | None = None
    matched_stop_str: str | None = None

    def abort(self, message: str) -> None:
        if self.finish is None:
            self.finish = finish_reason("abort", message=message)


def sample_next(logits: torch.Tensor, seqs: list[Sequence]) -> tuple[list[int], list[float]]:
    """logits: [B, V] float32 for the last position of each row."""
    temps = torch.tensor([1.0 if s.sampling.greedy else s.sampling.temperature for s in seqs],
                         dtype=logits.dtype, device=logits.device)
    logprobs = torch.log_softmax(logits / temps[:, None], dim=-1)
    tokens = []
    for i, seq in enumerate(seqs):
        sp = seq.sampling
        if sp.greedy:
            tokens.append(int(torch.argmax(logprobs[i])))
            continue
        probs = logprobs[i].exp()
        if sp.top_k > 0 and sp.top_k < probs.numel():
            kth = torch.topk(probs, sp.top_k).values[-1]
            probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
        if sp.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            # keep the smallest prefix whose mass reaches top_p (the first token always stays)
            drop = (torch.cumsum(sorted_p, 0) - sorted_p) >= sp.top_p * sorted_p.sum()
            sorted_p[drop] = 0.0
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_p)
        tokens.append(int(torch.multinomial(probs, 1, generator=seq.generator)))  # generator on probs' device
    chosen = logprobs.gather(1, torch.tensor(tokens, device=logits.device)[:, None])[:, 0]
    return tokens, chosen.tolist()


class StopChecker:
    """Decides when a sequence is finished: stop token ids, EOS, stop strings, length."""

    def __init__(self, tokenizer, eos_token_ids: set[int], max_context: int):
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.max_context = max_context

    def check(self, seq: Sequence) -> None:
        sp, token = seq.sampling, seq.output_ids[-1]
        if token in sp.stop_token_ids or (not sp.ignore_eos and token in self.eos_token_ids):
            seq.finish = finish_reason("stop", matched=token)
            return
        if sp.stop:
            # Only the tail can contain a new match: decode enough tokens to cover the longest stop.
            tail = self.tokenizer.decode(seq.output_ids[-(max(map(len, sp.stop)) + 8):],
                                         skip_special_tokens=sp.skip_special_tokens)
            for stop in sp.stop:
                if stop in tail:
                    seq.finish = finish_reason("stop", matched=stop)
                    seq.matched_stop_str = stop
                    return
        if len(seq.output_ids) >= sp.max_new_tokens:
            seq.finish = finish_reason("length", length=len(seq.output_ids))
        elif len(seq.prompt_ids) + len(seq.output_ids) >= self.max_context:
            seq.finish = finish_reason("length", length=len(seq.output_ids))

    def output_text(self, seq: Sequence) -> str:
        sp, ids = seq.sampling, seq.output_ids
        if seq.finish and seq.finish["type"] == "stop" and not sp.no_stop_trim:
            if seq.matched_stop_str is None:
                ids = ids[:-1]  # SGLang drops the matched stop token from the text
            text = self.tokenizer.decode(ids, skip_special_tokens=sp.skip_special_tokens)
            if seq.matched_stop_str is not None:
                text = text[: text.find(seq.matched_stop_str)] if seq.matched_stop_str in text else text
            return text
        return self.tokenizer.decode(ids, skip_special_tokens=sp.skip_special_tokens)


@torch.no_grad()
def generate(model, seqs: list[Sequence], stop: StopChecker, pad_id: int,
             run_step: Callable[[Callable[[], torch.Tensor]], torch.Tensor],
             between_steps: Callable[[list[Sequence]], None]) -> None:
    """Runs `seqs` to completion in one batch, filling output_ids/logprobs/finish in place.

    run_step(fn) runs one forward under the engine's weight lock (so weight updates land between
    steps, like SGLang's in-place pause); between_steps(active) applies aborts/pauses.
    Finished rows are dropped from the batch and from the KV cache.
    """
    from transformers import DynamicCache

    for seq in seqs:
        if seq.sampling.max_new_tokens == 0:
            seq.finish = finish_reason("length", length=0)
    active = [s for s in seqs if s.finish is None]
    if not active:
        return
    device = next(model.parameters()).device
    width = max(len(s.prompt_ids) for s in active)
    ids = torch.full((len(active), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(active), width), dtype=torch.long)
    for i, s in enumerate(active):  # left padding: every row's last prompt token is at column -1
        ids[i, width - len(s.prompt_ids):] = torch.tensor(s.prompt_ids)
        mask[i, width - len(s.prompt_ids):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()

    def forward(step_ids, step_pos):
        out = model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                    past_key_values=cache, use_cache=True)
        return out.logits[:, -1, :].float()

    logits = run_step(lambda: forward(ids, positions))
    last_pos = positions[:, -1]
    while active:
        tokens, lps = sample_next(logits, active)
        for seq, tok, lp in zip(active, tokens, lps):
            seq.output_ids.append(tok)
            seq.logprobs.append(lp)
            stop.check(seq)
        between_steps(active)
        keep = [i for i, s in enumerate(active) if s.finish is None]
        if not keep:
            return
        step_ids = torch.tensor([tokens[i] for i in keep], device=device)[:, None]
        if len(keep) < len(active):
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            mask, last_pos = mask[index], last_pos[index]
            active = [active[i] for i in keep]
        mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=device)], dim=1)
        last_pos = last_pos + 1
        logits = run_step(lambda: forward(step_ids, last_pos[:, None]))
