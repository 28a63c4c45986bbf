"""The distillation teacher's log-probs on the student's samples (algo.distill; docs/algorithms.md "On-policy
distillation"), from where algo.distill.where says (rlrun.config.kinds.TEACHERS, each kind naming its class here):

    TrainerTeacher  the trainer ranks run the teacher's forward (slime --opd-type megatron)
    EngineTeacher   engines serve the teacher and score each sample's tokens as a prompt (slime --opd-type sglang):
                    SGLang's /generate with input_ids = prompt + response, max_new_tokens 0, return_logprob and
                    logprob_start_len = one before the response's start (SGLang's first row is None: it computes
                    no logits before the start); meta_info.input_token_logprobs then holds log p_teacher of every
                    response token. The engines are rlrun's (algo.distill.served, placed on the plan's
                    "teacher" slots, started as reward engines are) or an external server (algo.distill.url).

Either gives one float tensor per sample, one value per response token, where the OPD term reads them
(rlrun.loops.steps.add_advantages). A teacher that cannot answer (every retry spent, an answer without the log-probs)
stops the run with an error naming it: the distillation term has no stand-in for a missing teacher log-prob."""
from __future__ import annotations

import asyncio
import logging

import torch

log = logging.getLogger(__name__)
ROLE = "teacher"  # the plan's placement role (rlrun.config.plan.teacher_slots)


class TeacherError(RuntimeError):
    """The teacher gave no log-probs for a sample."""


class TrainerTeacher:
    def __init__(self, trainer):
        self.trainer = trainer

    @classmethod
    def from_parts(cls, cfg, plan, trainer, start) -> "TrainerTeacher":
        return cls(trainer)

    def log_probs(self, batch) -> list[torch.Tensor]:
        return self.trainer.compute_log_probs(batch, "teacher")


class EngineTeacher:
    def __init__(self, url: str, *, timeout_s: float = 60.0, max_retries: int = 2, max_concurrency: int = 64,
                 backoff_s: float = 0.2):
        self.url, self.timeout_s, self.max_retries = url, timeout_s, max_retries
        self.max_concurrency, self.backoff_s = max_concurrency, backoff_s

    @classmethod
    def from_parts(cls, cfg, plan, trainer, start) -> "EngineTeacher":
        """algo.distill.url: that server; else `start(role, served section, checkpoint, engine count)` starts
        rlrun's teacher engines (rlrun.parts.reward_engines.start_served) and gives their router's URL."""
        d = cfg.algo.distill
        url = d.url or f"{start(ROLE, d.served, d.teacher, plan.teacher_engines)}/generate"
        return cls(url, timeout_s=d.served.timeout_s, max_retries=d.served.max_retries,
                   max_concurrency=d.served.max_concurrency)

    @staticmethod
    def request(tokens: list[int], response_start: int) -> dict:
        """The /generate body (SGLang's GenerateReqInput) scoring `tokens` from `response_start` on; temperature 1:
        the teacher's own distribution, as the trainer's log-probs of the student are. The rows start one token
        earlier: SGLang answers None for the start position itself (found on the GPU, 2026-11-28)."""
        return {"input_ids": tokens, "sampling_params": {"max_new_tokens": 0, "temperature": 1.0},
                "return_logprob": True, "logprob_start_len": max(response_start - 1, 0)}

    @staticmethod
    def parse(answer: dict, n: int) -> torch.Tensor:
        """The log-probs of the last `n` input tokens (the response) in an answer's input_token_logprobs
        ([logprob, token_id, text] rows; the prompt's first token has no log-prob: None)."""
        rows = (answer.get("meta_info") or {}).get("input_token_logprobs") if isinstance(answer, dict) else None
        if not isinstance(rows, list) or len(rows) < n:
            raise TeacherError(f"the teacher answered {0 if not isinstance(rows, list) else len(rows)} "
                               f"input_token_logprobs for a response of {n} tokens: {str(answer)[:200]}")
        values = [row[0] for row in rows[len(rows) - n:]]
        if any(v is None for v in values):
            raise TeacherError("the teacher answered no log-prob (None) for a response token")
        return torch.tensor(values, dtype=torch.float32)

    def log_probs(self, batch) -> list[torch.Tensor]:
        bodies = [self.request([int(t) for t in tokens], start)
                  for tokens, start in zip(batch.tokens, batch.response_start)]
        lengths = [len(tokens) - start for tokens, start in zip(batch.tokens, batch.response_start)]
        answers = asyncio.run(self._ask_all(bodies))
        return [self.parse(a, n) for a, n in zip(answers, lengths)]

    async def _ask_all(self, bodies: list[dict]) -> list[dict]:
        import aiohttp

        sem = asyncio.Semaphore(self.max_concurrency)

        async def one(session, body):
            async with sem:
                return await self._ask(session, body)

        async with aiohttp.ClientSession() as session:
            return list(await asyncio.gather(*(one(session, b) for b in bodies)))

    async def _ask(self, session, body: dict) -> dict:
        import aiohttp

        last: BaseException | None = None
        for attempt in range(self.max_retries + 1):
            try:
                async with session.post(self.url, json=body,
                                        timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as resp:
                    resp.raise_for_status()
                    return await resp.json(content_type=None)
            except Exception as e:  # noqa: BLE001 - a failed or slow request is retried, then stops the run
                last = e
                if attempt < self.max_retries:
                    log.warning("teacher %s: attempt %d failed: %r", self.url, attempt + 1, e)
                    await asyncio.sleep(min(self.backoff_s * 2**attempt, 10.0))
        why = (f"timed out after {self.timeout_s:g} s" if isinstance(last, asyncio.TimeoutError)
               else f"{type(last).__name__}: {last}")
        raise TeacherError(f"the distillation teacher at {self.url} failed {self.max_retries + 1} times: {why} "
                           "(algo.distill.served.timeout_s / max_retries; is the teacher server up?)")
