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
    token_ids: list[int] | None = None   # SGLang's token_ids_logprob: ids whose log-probs each step reports
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    token_ids_logprobs: list[list[float]] = field(default_factory=list)
    finish: dict | None = None
    matched_stop_str: str | None = None
    # return_routed_experts: the [tokens, layers, top_k] expert ids of every position fed to the model
    # (prompt at prefill, then each sampled token but the last), one tensor per forward
    return_routed_experts: bool = False
    routed_start: int = 0  # SGLang's routed_experts_start_len: the answer covers positions [start, seqlen - 1)
    routed: list[torch.Tensor] = field(default_factory=list)
    # SGLang's logprob_start_len (with return_logprob): the log-probs of the prompt's tokens from this position on,
    # the first None (SGLang computes no logits before it), computed at admission; None = not asked
    input_start: int | None = None
    input_logprobs: list[float | None] = field(default_factory=list)

    def routed_experts(self) -> torch.Tensor:
        """int32 [positions, layers, top_k] for positions [routed_start, seqlen - 1)."""
        return torch.cat(self.routed)[self.routed_start:] if self.routed else torch.zeros(0, dtype=torch.int32)

    def abort(self, message: str) -> None:
        if self.finish is None:
            self.finish = finish_reason("abort", message=message)


def sample_next(logits: torch.Tensor, seqs: list[Sequence]) -> tuple[list[int], list[float]]:
    """logits: [B, V] float32 for the last position of each row. A row with token_ids also gets those ids'
    log-probs (of the same temperature-scaled distribution as its chosen token's) appended to token_ids_logprobs."""
    temps = torch.tensor([1.0 if s.sampling.greedy else s.sampling.temperature for s in seqs],
                         dtype=logits.dtype, device=logits.device)
    logprobs = torch.log_softmax(logits / temps[:, None], dim=-1)
    tokens = []  # 1-element tensors: one host sync for the whole batch at the end, not one per row
    for i, seq in enumerate(seqs):
        sp = seq.sampling
        if sp.greedy:
            tokens.append(torch.argmax(logprobs[i]).reshape(1))
            continue
        probs = logprobs[i].exp()
        if sp.top_k > 0 and sp.top_k < probs.numel():
            kth = torch.topk(probs, sp.top_k).values[-1]
            probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
        if sp.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            # keep the smallest prefix whose mass reaches top_p (the first token always stays)
            drop = (torch.cumsum(sorted_p, 0) - sorted_p) >= sp.top_p * sorted_p.sum()
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_p)
        tokens.append(torch.multinomial(probs, 1, generator=seq.generator))  # generator on probs' device
    chosen_ids = torch.cat(tokens)
    chosen = logprobs.gather(1, chosen_ids[:, None])[:, 0]
    for i, seq in enumerate(seqs):
        if seq.token_ids is not None:
            seq.token_ids_logprobs.append(logprobs[i, seq.token_ids].tolist())
    return chosen_ids.tolist(), chosen.tolist()


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
        if (len(seq.output_ids) >= sp.max_new_tokens
                or len(seq.prompt_ids) + len(seq.output_ids) >= self.max_context):
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


def _left_pad(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - t.shape[dim]
    if missing == 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


class RunningBatch:
    """Continuous batching: sequences join (admit) and leave (drop_finished) between decode steps.

    Every row is left-padded to the batch's width; `mask` marks real tokens, `last_pos` holds each
    row's own position (so RoPE never sees the padding). New requests are prefilled as their own
    mini-batch and merged into the running KV cache by left-padding the shorter of the two along
    the time axis; columns that no remaining row uses are trimmed after rows leave.
    run_step(fn) runs a forward under the engine's weight lock, so weights change between steps.
    """

    def __init__(self, model, stop: StopChecker, pad_id: int,
                 run_step: Callable[[Callable[[], torch.Tensor]], torch.Tensor], capture=None):
        self.model, self.stop, self.pad_id, self.run_step = model, stop, pad_id, run_step
        self.capture = capture  # rlrun.rollout.routing.RoutingCapture: the routed experts of the rows that ask
        self.seqs: list[Sequence] = []
        self.cache = self.mask = self.last_pos = None

    def __len__(self) -> int:
        return len(self.seqs)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _forward(self, cache, mask, ids, positions, seqs: list[Sequence]) -> torch.Tensor:
        """Logits of the last position of each row; rows asking for routed experts get the expert ids
        of their real (not left-padding) positions of this forward."""
        wanted = self.capture is not None and any(s.return_routed_experts for s in seqs)
        if wanted:
            self.capture.on = True
        try:
            logits = self._model_forward(cache, mask, ids, positions)
        finally:
            if wanted:
                self.capture.on = False
        if wanted:
            routed = self.capture.ids(ids.numel()).reshape(*ids.shape, self.capture.num_layers, self.capture.top_k)
            for row, seq in enumerate(seqs):
                if seq.return_routed_experts:
                    fed = ids.shape[1] if ids.shape[1] == 1 else len(seq.prompt_ids)  # decode: 1; prefill: the prompt
                    seq.routed.append(routed[row, ids.shape[1] - fed:])
        return logits

    def _model_forward(self, cache, mask, ids, positions) -> torch.Tensor:
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                         use_cache=True)
        return out.logits[:, -1, :].float()

    def _sample(self, seqs: list[Sequence], logits: torch.Tensor) -> None:
        tokens, lps = sample_next(logits, seqs)
        for seq, tok, lp in zip(seqs, tokens, lps):
            seq.output_ids.append(tok)
            seq.logprobs.append(lp)
            self.stop.check(seq)

    @torch.no_grad()
    def admit(self, new: list[Sequence]) -> list[Sequence]:
        """Prefills `new` and adds it to the batch; returns those finished without a token
        (max_new_tokens=0), which never join."""
        from transformers import DynamicCache

        scored = [s for s in new if s.input_start is not None]
        if scored:
            self.run_step(lambda: self._score_inputs(scored))
        empty = [s for s in new if s.sampling.max_new_tokens == 0]
        for seq in empty:
            seq.finish = finish_reason("length", length=0)
        new = [s for s in new if s.finish is None]
        if not new:
            return empty
        device = self.device
        width = max(len(s.prompt_ids) for s in new)
        ids = torch.full((len(new), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(new), width), dtype=torch.long)
        for i, s in enumerate(new):
            ids[i, width - len(s.prompt_ids):] = torch.tensor(s.prompt_ids)
            mask[i, width - len(s.prompt_ids):] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        logits = self.run_step(lambda: self._forward(cache, mask, ids, positions, new))
        self._sample(new, logits)
        if self.cache is None:
            self.seqs, self.cache, self.mask, self.last_pos = new, cache, mask, positions[:, -1]
        else:
            self._merge(new, cache, mask, positions[:, -1])
        return empty

    @torch.no_grad()
    def _score_inputs(self, seqs: list[Sequence]) -> None:
        """Each sequence's input_logprobs: log p(prompt[k] | prompt[:k]) for k >= input_start, of the same
        temperature-scaled distribution as its output log-probs (one forward per sequence, no cache)."""
        for seq in seqs:
            ids = torch.tensor([seq.prompt_ids], dtype=torch.long, device=self.device)
            logits = self.model(input_ids=ids).logits[0, :-1].float()
            temp = 1.0 if seq.sampling.greedy else seq.sampling.temperature
            lp = torch.log_softmax(logits / temp, dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
            # SGLang's alignment (logprob_result_processor: [None] + logprobs[:-1]): the rows are the tokens from
            # input_start on and the first is None even past position 0, as SGLang computes no logits before it
            seq.input_logprobs = [None] + lp.tolist()[seq.input_start:]

    def _merge(self, new, cache, mask, last_pos) -> None:
        width = max(self.mask.shape[1], mask.shape[1])
        for old_layer, new_layer in zip(self.cache.layers, cache.layers):
            for name in ("keys", "values"):
                merged = torch.cat([_left_pad(getattr(old_layer, name), width, 2),
                                    _left_pad(getattr(new_layer, name), width, 2)], dim=0)
                setattr(old_layer, name, merged)
        self.mask = torch.cat([_left_pad(self.mask, width, 1), _left_pad(mask, width, 1)], dim=0)
        self.last_pos = torch.cat([self.last_pos, last_pos])
        self.seqs = self.seqs + new

    def drop_finished(self) -> list[Sequence]:
        done = [s for s in self.seqs if s.finish is not None]
        if not done:
            return []
        keep = [i for i, s in enumerate(self.seqs) if s.finish is None]
        if not keep:
            self.seqs, self.cache, self.mask, self.last_pos = [], None, None, None
            return done
        index = torch.tensor(keep, device=self.mask.device)
        self.cache.batch_select_indices(index)
        self.mask, self.last_pos = self.mask[index], self.last_pos[index]
        self.seqs = [self.seqs[i] for i in keep]
        # drop leading columns no remaining row attends to (they only cost compute)
        used = self.mask.any(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0
        if first:
            self.mask = self.mask[:, first:]
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, first:], layer.values[:, :, first:]
        return done

    @torch.no_grad()
    def step(self) -> None:
        """Feeds every row's last sampled token and samples the next one."""
        device = self.device
        ids = torch.tensor([s.output_ids[-1] for s in self.seqs], device=device)[:, None]
        self.mask = torch.cat([self.mask, torch.ones((len(self.seqs), 1), dtype=self.mask.dtype, device=device)],
                              dim=1)
        self.last_pos = self.last_pos + 1
        mask, positions, cache = self.mask, self.last_pos[:, None], self.cache
        seqs = self.seqs
        logits = self.run_step(lambda: self._forward(cache, mask, ids, positions, seqs))
        self._sample(self.seqs, logits)

    def fail(self) -> list[Sequence]:
        """After an exception: forget the batch, hand back its sequences."""
        seqs, self.seqs, self.cache, self.mask, self.last_pos = self.seqs, [], None, None, None
        return seqs


def generate(model, seqs: list[Sequence], stop: StopChecker, pad_id: int,
             run_step: Callable[[Callable[[], torch.Tensor]], torch.Tensor],
             between_steps: Callable[[list[Sequence]], None]) -> None:
    """Runs `seqs` to completion as one batch (no later arrivals), filling them in place."""
    batch = RunningBatch(model, stop, pad_id, run_step)
    batch.admit(seqs)
    while len(batch):
        between_steps(batch.seqs)
        batch.drop_finished()
        if len(batch):
            batch.step()
