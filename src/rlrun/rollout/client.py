"""The rollout client: SGLang's /generate over HTTP (through the router, rollout.router.kind), asyncio + aiohttp.

Bounded concurrency (one semaphore per client), a per-request timeout, retries with exponential
backoff and jitter on transport errors, timeouts and 5xx/429 answers (a dead engine shows up as a
connection error or a router 5xx; the retry lands on another engine), no retry on other 4xx
(the request itself is wrong: raised with the server's message). Generation requests are
idempotent, so retrying a request whose engine died mid-way is safe.

The retries are bounded by count and by time: a request fails only once `max_retries` retries are
spent AND `retry_window_s` has passed since its first failure. The window (rollout.retry_window_s,
derived from the engine health checks: rlrun.config.engine_health.engine_loss_s) outlasts the removal
of a dead engine from the router, however few retries the count allows, so the requests of a lost
engine (or node) are retried elsewhere instead of failing the rollout.

Identical requests made in one turn of the event loop (a GRPO group: its n samples start together, with no seed
where the engine's sampling ignores one: EngineKind.seeded) go as one batched /generate (SGLang's list form of the
prompt, one sampling_params; sglang-router 0.3.2 forwards it whole to one engine, so the group shares its prefix
cache, and refuses a list of rids or of sampling_params) and each caller gets its own answer. A request with its own
seed goes alone. A batch of n takes n of the max_concurrency slots.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import aiohttp

from rlrun.config.kinds import ENGINES
from rlrun.rollout import api

from rlrun.data import Status
from rlrun.data.sample import RoutedExperts

# finish_reason.type -> Sample status
STATUS_BY_FINISH = {"stop": Status.COMPLETED, "length": Status.TRUNCATED, "abort": Status.ABORTED}


class RolloutError(RuntimeError):
    pass


@dataclass(frozen=True)
class Sampling:
    """Sampling for a rollout, from rollout.* (temperature, top_p, top_k, max_response_len, stop)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    # RL wants the text to match the tokens the trainer sees (slime sends the same two flags).
    skip_special_tokens: bool = False
    no_stop_trim: bool = True
    ignore_eos: bool = False  # benchmarks and tests: fixed-length responses

    @classmethod
    def from_config(cls, rollout_cfg) -> "Sampling":
        return cls(max_new_tokens=rollout_cfg.max_response_len, temperature=rollout_cfg.temperature,
                   top_p=rollout_cfg.top_p, top_k=rollout_cfg.top_k, stop=tuple(rollout_cfg.stop or ()),
                   stop_token_ids=tuple(getattr(rollout_cfg, "stop_token_ids", None) or ()))

    def to_json(self, seed: int | None = None) -> dict:
        out = {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature, "top_p": self.top_p,
               "top_k": self.top_k, "stop": list(self.stop), "stop_token_ids": list(self.stop_token_ids),
               "skip_special_tokens": self.skip_special_tokens, "no_stop_trim": self.no_stop_trim,
               "ignore_eos": self.ignore_eos}
        if seed is not None:
            out["sampling_seed"] = seed
        return out


class _Slots:
    """max_concurrency as samples in flight: acquire(k) takes k slots at once (a batch of k samples), so that
    batches never hold part of what they need while waiting for the rest (k is capped at the total); waiters are
    served in order (a big batch is not overtaken for ever by small ones). release() does not wait."""

    def __init__(self, total: int):
        self.total, self.free = total, total
        self._waiters: collections.deque[tuple[int, asyncio.Future]] = collections.deque()

    async def acquire(self, k: int) -> int:
        k = min(k, self.total)
        if not self._waiters and self.free >= k:
            self.free -= k
            return k
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((k, fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted, then cancelled before it ran: give them back
                self.release(k)
            raise
        return k

    def release(self, k: int) -> None:
        self.free += k
        while self._waiters:
            need, fut = self._waiters[0]
            if fut.done():  # its caller was cancelled while waiting
                self._waiters.popleft()
            elif self.free >= need:
                self._waiters.popleft()
                self.free -= need
                fut.set_result(None)
            else:
                break


class _Coalescer:
    """Collects the /generate bodies of one event-loop turn that are the same but for their rid and sends each set
    as one batched body through `send(body, url, n)` (a single body when alone); every caller awaits its own answer
    (a failed batch fails each of its callers with the same error)."""

    def __init__(self, send: Callable[[dict, Any, int], Any]):
        self.send = send
        self.pending: dict[tuple, tuple[Any, list[tuple[dict, asyncio.Future]]]] = {}
        self._sending: set[asyncio.Task] = set()  # the loop keeps only weak references to tasks
        self.batches = 0  # batched requests sent (more than one sample; a test hook)

    @staticmethod
    def _key(body: dict, url) -> tuple:
        return json.dumps({k: v for k, v in body.items() if k != "rid"}, sort_keys=True), url is None

    async def request(self, body: dict, url) -> Any:
        """url: as RolloutClient.post takes it (None: the router); requests to the same kind of target combine."""
        loop = asyncio.get_running_loop()
        if not self.pending:
            loop.call_soon(self._flush)
        fut = loop.create_future()
        self.pending.setdefault(self._key(body, url), (url, []))[1].append((body, fut))
        return await fut

    def _flush(self) -> None:
        pending, self.pending = self.pending, {}
        for url, items in pending.values():
            task = asyncio.ensure_future(self._send(items, url))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, items: list[tuple[dict, asyncio.Future]], url) -> None:
        futures = [f for _b, f in items]
        try:
            if len(items) == 1:
                answers = [await self.send(items[0][0], url, 1)]
            else:
                self.batches += 1
                first = items[0][0]
                body = {k: v for k, v in first.items() if k not in ("rid", "sampling_params", "input_ids", "text")}
                prompt = "input_ids" if "input_ids" in first else "text"
                body[prompt] = [b[prompt] for b, _f in items]
                body["sampling_params"] = first["sampling_params"]
                answers = await self.send(body, url, len(items))
                if not isinstance(answers, list) or len(answers) != len(items):
                    raise RolloutError(f"a batched /generate of {len(items)} samples got "
                                       f"{len(answers) if isinstance(answers, list) else type(answers).__name__} "
                                       "answers; the engine must answer a batched /generate with one answer per item")
        except asyncio.CancelledError:  # the loop is going down: so are its callers
            for f in futures:
                f.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - each caller gets the batch's error
            for f in futures:
                if not f.done():
                    f.set_exception(exc)
            return
        for f, answer in zip(futures, answers):
            if not f.done():
                f.set_result(answer)


class RolloutClient:
    def __init__(self, url: str, *, max_concurrency: int = 64, request_timeout_s: float = 300.0,
                 max_retries: int = 5, retry_window_s: float = 0.0, backoff_s: float = 0.25,
                 max_backoff_s: float = 4.0, routing_shape: tuple[int, int] | None = None,
                 engine_urls: Callable[[], list[str]] | None = None, seeded: bool = True):
        self.url = url.rstrip("/")
        # the engines sample with a request's sampling_seed (EngineKind.seeded); False: seeds are not sent, and a
        # group's requests are the same and go batched
        self.seeded = seeded
        # (num_layers, top_k): every /generate asks for the routed experts (return_routed_experts), which
        # RoutedExperts holds in that shape (rollout.routing_replay; routing_shape(cfg)); None: not asked
        self.routing_shape = routing_shape
        # the engines' current URLs: /generate asking for routed experts goes to them directly, in turn (each
        # attempt of a retry to the next), because sglang-router 0.3.2 drops return_routed_experts
        self.engine_urls = engine_urls
        self._turn = 0
        self.max_concurrency = max_concurrency
        self.request_timeout_s = request_timeout_s
        self.max_retries = max_retries
        self.retry_window_s = retry_window_s  # retried at least this long after the first failure
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.retries = 0  # total retries performed (a metric and a test hook)
        self._slots: _Slots | None = None
        self._session: aiohttp.ClientSession | None = None
        self._batches = _Coalescer(lambda body, url, n: self.post("/generate", body, url=url, samples=n))

    @classmethod
    def from_config(cls, url: str, rollout_cfg, routing_shape: tuple[int, int] | None = None,
                    engine_urls: Callable[[], list[str]] | None = None) -> "RolloutClient":
        return cls(url, max_concurrency=rollout_cfg.max_concurrency,
                   request_timeout_s=rollout_cfg.request_timeout_s, max_retries=rollout_cfg.max_retries,
                   retry_window_s=rollout_cfg.retry_window_s, routing_shape=routing_shape, engine_urls=engine_urls,
                   seeded=ENGINES[rollout_cfg.engine].seeded(rollout_cfg.args_of() or {}))

    def _next_engine(self) -> str:
        urls = list(self.engine_urls())
        if not urls:
            raise RolloutError("no engine to send the request to (the engine group is empty)")
        self._turn += 1
        return urls[self._turn % len(urls)]

    async def __aenter__(self) -> "RolloutClient":
        self._slots = _Slots(self.max_concurrency)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.max_concurrency),
            timeout=aiohttp.ClientTimeout(total=self.request_timeout_s))
        return self

    async def __aexit__(self, *exc) -> None:
        await self._session.close()
        self._session = None

    def _delay(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** attempt) * (0.5 + random.random())

    @property
    def batches(self) -> int:
        """Batched /generate requests sent so far (a group's samples together)."""
        return self._batches.batches

    async def post(self, path: str, body: dict, *, url: str | Callable[[], str] | None = None,
                   samples: int = 1) -> Any:
        """POST with retries; returns the decoded JSON (or None for an empty 200). url: a base URL, or a
        callable asked for one at every attempt (a retry may go elsewhere). samples: the concurrency slots it
        takes (a batched /generate: one per sample)."""
        if self._session is None:
            raise RolloutError("RolloutClient used outside `async with RolloutClient(...)`")
        last, attempt, first_failure = "", 0, None
        while True:
            if attempt:
                self.retries += 1
                await asyncio.sleep(self._delay(attempt - 1))
            target = f"{(url() if callable(url) else (url or self.url)).rstrip('/')}{path}"
            held = await self._slots.acquire(samples)
            try:
                async with self._session.post(target, json=body) as resp:
                    text = await resp.text()
                    if resp.status == 200:
                        return await resp.json(content_type=None) if text else None
                    last = f"HTTP {resp.status}: {text[:300]}"
                    if 400 <= resp.status < 500 and resp.status != 429:
                        raise RolloutError(f"POST {target} rejected: {last}")
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            finally:
                self._slots.release(held)
            attempt += 1
            first_failure = first_failure if first_failure is not None else time.monotonic()
            waited = time.monotonic() - first_failure
            if attempt > self.max_retries and waited >= self.retry_window_s:
                break
        raise RolloutError(f"POST {target} failed after {attempt} attempts over {waited:.0f} s (last: {last}); "
                           f"are the engines behind the router alive? (rollout.max_retries, "
                           f"rollout.retry_window_s, rollout.request_timeout_s)")

    async def generate(self, *, text: str | None = None, input_ids: list[int] | None = None,
                       sampling: Sampling, rid: str | None = None, seed: int | None = None) -> dict:
        body = {"sampling_params": sampling.to_json(seed if self.seeded else None), "return_logprob": True,
                "rid": rid or uuid.uuid4().hex}
        direct = None
        if self.routing_shape is not None:  # every position's experts (routed_experts_start_len 0, as slime)
            body["return_routed_experts"] = True
            direct = self._next_engine if self.engine_urls is not None else None
        if input_ids:
            body["input_ids"] = list(input_ids)
        else:
            body["text"] = text
        return await self._batches.request(body, direct)

    async def generate_group(self, prompt: str | list[int], n: int, sampling: Sampling) -> list[dict]:
        """n samples of one prompt (a GRPO group), as n concurrent requests."""
        kwargs = {"input_ids": prompt} if isinstance(prompt, list) else {"text": prompt}
        return list(await asyncio.gather(*(self.generate(sampling=sampling, **kwargs) for _ in range(n))))

    async def generate_batch(self, samples: Iterable, sampling: Sampling,
                             seeds: list[int] | None = None) -> list:
        """Generates one response per sample and fills the samples in place (see fill_sample).
        seeds: one sampling_seed per sample for reproducible rollouts (None: engine-chosen)."""
        samples = list(samples)
        seeds = seeds if seeds is not None else [None] * len(samples)
        if len(seeds) != len(samples):
            raise ValueError(f"generate_batch got {len(samples)} samples but {len(seeds)} seeds")

        async def one(sample, seed):
            if sample.status is Status.ABORTED and sample.response_tokens:
                await self._continue(sample, sampling, seed)
                return sample
            out = await self.generate(text=sample.prompt, input_ids=sample.prompt_tokens or None,
                                      sampling=sampling, seed=seed)
            fill_sample(sample, out, routing_shape=self.routing_shape)
            return sample

        return list(await asyncio.gather(*(one(s, seed) for s, seed in zip(samples, seeds))))

    async def _continue(self, sample, sampling: Sampling, seed: int | None) -> None:
        """Partial rollout: an aborted sample continues from prompt + its response so far, under
        the current weights, with the remaining token budget (slime's --partial-rollout)."""
        if not sample.prompt_tokens:
            raise RolloutError("continuing an aborted sample needs sample.prompt_tokens (the response "
                               "tokens are appended to them); tokenize prompts before the rollout")
        budget = sampling.max_new_tokens - len(sample.response_tokens)
        if budget <= 0:
            sample.status = Status.TRUNCATED
            return
        out = await self.generate(input_ids=list(sample.prompt_tokens) + list(sample.response_tokens),
                                  sampling=dataclasses.replace(sampling, max_new_tokens=budget), seed=seed)
        fill_sample(sample, out, append=True, routing_shape=self.routing_shape)

    async def abort_all(self, engine_urls: list[str]) -> None:
        """/abort_request to every engine (the router forwards a request to one engine only)."""
        await asyncio.gather(*(self.post("/abort_request", api.abort_request_body(abort_all=True), url=u)
                               for u in engine_urls))


def routing_shape(cfg) -> tuple[int, int] | None:
    """(num_layers, top_k) of the routed experts a rollout asks the engines for: rollout.routing_replay on a
    MoE model (the rules refuse it on a dense one), else None."""
    if not cfg.rollout.routing_replay or cfg.model.moe is None:
        return None
    return cfg.model.num_layers, cfg.model.moe.top_k


def routed_experts(meta: dict, shape: tuple[int, int] | None, rows: int) -> RoutedExperts | None:
    """meta_info["routed_experts"] of an answer asked with return_routed_experts (None when not asked),
    checked to hold `rows` rows (prompt + output - 1: SGLang's [routed_experts_start_len=0, seqlen - 1))."""
    if shape is None:
        return None
    text = meta.get("routed_experts")
    if text is None:
        raise RolloutError(f"request {meta.get('id')}: return_routed_experts=true but the answer has no "
                           "meta_info.routed_experts: the router (0.3.2, the pin) parses /generate into its own "
                           "GenerateRequest, which has no return_routed_experts field, and drops it before the engine "
                           "(give RolloutClient the engine_urls to send such requests to the engines directly); the engine "
                           "must also record them, which rlrun asks of it with rollout.routing_replay")
    routed = RoutedExperts.from_base64(text, *shape)
    if routed.rows != max(rows, 0):
        raise RolloutError(f"request {meta.get('id')}: {routed.rows} rows of routed experts for {rows} fed "
                           f"positions (prompt + output - 1); model.num_layers / model.moe.top_k may not match the "
                           f"engine's model ({shape})")
    return routed


def fill_sample(sample, out: dict, append: bool = False, routing_shape: tuple[int, int] | None = None) -> None:
    """Writes an SGLang /generate answer into an rlrun.data.Sample (names: docs/CONTRACT.md);
    append=True extends a partial (aborted) response instead of replacing it. routing_shape: the answer
    carries routed experts (for the whole sequence: they replace the sample's)."""
    meta = out["meta_info"]
    tokens = list(out["output_ids"])
    logprobs = [lp for lp, _tok, _txt in meta.get("output_token_logprobs", [])]
    if len(logprobs) != len(tokens):
        raise RolloutError(f"request {meta.get('id')}: {len(tokens)} output ids but {len(logprobs)} "
                           f"log-probs; send return_logprob=true")
    if append:
        sample.response += out["text"]
        sample.response_tokens = list(sample.response_tokens) + tokens
        sample.rollout_logprobs = list(sample.rollout_logprobs or []) + logprobs
        sample.loss_mask = list(sample.effective_loss_mask) + [1] * len(tokens)
    else:
        sample.response = out["text"]
        sample.response_tokens = tokens
        sample.rollout_logprobs = logprobs
        sample.loss_mask = [1] * len(tokens)
    if routing_shape is not None:
        fed = len(sample.prompt_tokens) + len(sample.response_tokens) - 1
        sample.routed_experts = routed_experts(meta, routing_shape, fed)
    sample.weight_version = weight_version_number(meta["weight_version"])
    sample.status = STATUS_BY_FINISH[meta["finish_reason"]["type"]]
    sample.metadata["finish_reason"] = meta["finish_reason"]


def weight_version_number(version: str) -> int | None:
    """SGLang's weight_version is a string; rlrun pushes the trainer step as str(int) and Sample keeps
    an int. The initial weights report SGLang's "default" -> None (no update yet)."""
    try:
        return int(version)
    except (TypeError, ValueError):
        return None
