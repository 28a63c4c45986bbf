"""What a slime generate function imports from slime: ``Sample`` (with ``Sample.Status``),
``GenerateState`` and the HTTP helpers ``post`` / ``get`` / ``init_http_client``.

When slime is importable (its checkout on ``sys.path``), these ARE slime's own objects
(``slime.utils.types.Sample``, ``slime.rollout.sglang_rollout.GenerateState``,
``slime.utils.http_utils``), so ``isinstance(sample, Sample)`` and ``sample.status is
Sample.Status.COMPLETED`` hold inside the function exactly as in slime. Otherwise rlrun's stand-ins
below, written to the same calls and semantics (read from slime/utils/types.py,
slime/rollout/sglang_rollout.py and slime/utils/http_utils.py), are used, each one for a module of
slime's that does not import; that is logged once per module (``SOURCE``, ``IMPORT_ERRORS``). A function written against this module runs unchanged against both.

The stand-ins cover what generate functions use: the Sample fields, ``append_response_tokens``
(extends ``tokens`` / ``loss_mask`` / ``rollout_log_probs``, appends ``text=`` to ``response``,
records ``weight_version`` and sets ``status`` from ``meta_info["finish_reason"]``), a process-wide
``GenerateState`` (tokenizer of ``args.hf_checkpoint``, the sampling dict slime builds, a semaphore),
and ``post`` with slime's retries (once a second, 60 tries). Not covered (refused with an error
rather than dropped): top-p token replay and routed-expert metadata in ``meta_info``.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

log = logging.getLogger(__name__)

_REPLAY_KEYS = ("top_p_token_ids", "top_p_kept_token_ids", "top_p_token_offsets", "top_p_kept_token_offsets",
                "routed_experts")


@dataclass
class _Sample:
    """rlrun's stand-in for slime.utils.types.Sample (the fields generate functions read and write)."""

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: Any = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: dict | None = None
    multimodal_train_inputs: dict | None = None
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    response: str = ""
    response_length: int = 0
    label: Any = None
    reward: Any = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_top_p_token_ids: Any = None
    rollout_top_p_token_offsets: Any = None
    remove_sample: bool = False

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    train_metadata: dict | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0

    @property
    def effective_response_length(self) -> int:
        return sum(self.loss_mask) if self.loss_mask is not None else self.response_length

    def get_reward_value(self, args) -> float:
        key = getattr(args, "reward_key", None)
        return self.reward[key] if key else self.reward

    def append_response_tokens(self, args=None, *, tokens=None, log_probs=None, trainable: bool = True,
                               meta_info: dict | None = None, text: str | None = None,
                               update_terminal_info: bool = True) -> None:
        """Extend the response: model tokens (trainable, with their log-probs) or tool/environment
        tokens (not trainable: loss mask 0, log-prob 0.0). `text` is appended to `response`;
        meta_info's weight_version and finish_reason (stop/length/abort -> status) are applied."""
        tokens = [int(t) for t in (tokens if tokens is not None else [])]
        log_probs = None if log_probs is None else [float(x) for x in log_probs]
        if log_probs is not None and len(log_probs) != len(tokens):
            raise ValueError(f"log_probs length {len(log_probs)} != tokens length {len(tokens)}")
        if tokens and trainable and log_probs is None:
            raise ValueError("trainable response tokens require rollout log probabilities.")
        if tokens and not trainable:
            if log_probs is not None:
                raise ValueError("non-trainable response tokens should not pass rollout log probabilities.")
            log_probs = [0.0] * len(tokens)
        if text is not None:
            self.response += text
        before = self.response_length
        if tokens:
            self.tokens += tokens
            self.response_length += len(tokens)
            if self.loss_mask is None:
                self.loss_mask = [1] * before
            self.loss_mask += [int(bool(trainable))] * len(tokens)
        if log_probs is not None:
            if self.rollout_log_probs is None:
                if trainable and before:
                    raise ValueError("Cannot append trainable rollout log probabilities to a sample with existing "
                                     "response tokens but no existing rollout_log_probs.")
                self.rollout_log_probs = [0.0] * before
            self.rollout_log_probs += log_probs
        if meta_info:
            self._apply_meta_info(meta_info, update_terminal_info)
        for name, values in (("loss_mask", self.loss_mask), ("rollout_log_probs", self.rollout_log_probs)):
            if values is not None and len(values) != self.response_length:
                raise ValueError(f"{name} length {len(values)} != response_length {self.response_length}")

    def _apply_meta_info(self, meta_info: dict, update_terminal_info: bool) -> None:
        replay = [k for k in _REPLAY_KEYS if meta_info.get(k) is not None]
        if replay:
            raise ValueError(f"meta_info carries {replay}: top-p token replay / routed-expert replay need slime's "
                             "own Sample (put slime on sys.path)")
        if not update_terminal_info or "finish_reason" not in meta_info:
            return
        if "weight_version" in meta_info:
            self.weight_versions.append(meta_info["weight_version"])
        status = {"length": _Sample.Status.TRUNCATED, "abort": _Sample.Status.ABORTED,
                  "stop": _Sample.Status.COMPLETED}.get(meta_info["finish_reason"]["type"])
        if status is not None:
            self.status = status


class _GenerateState:
    """rlrun's stand-in for slime's GenerateState: one per process (slime's SingletonMeta), built
    from the first `args` it is given."""

    _instance: "_GenerateState | None" = None

    def __new__(cls, args=None):
        if cls._instance is None:
            inst = super().__new__(cls)
            inst._build(args)
            cls._instance = inst
        return cls._instance

    def __init__(self, args=None):
        pass

    def _build(self, args) -> None:
        from transformers import AutoTokenizer

        self.args = args
        self.tokenizer = AutoTokenizer.from_pretrained(args.hf_checkpoint, trust_remote_code=True)
        self.processor = None
        engines = max(1, int(getattr(args, "rollout_num_engines", 1) or 1))
        self.semaphore = asyncio.Semaphore(args.sglang_server_concurrency * engines)
        self.sampling_params = dict(
            temperature=args.rollout_temperature, top_p=args.rollout_top_p, top_k=args.rollout_top_k,
            max_new_tokens=args.rollout_max_response_len, stop=args.rollout_stop,
            stop_token_ids=args.rollout_stop_token_ids, skip_special_tokens=args.rollout_skip_special_tokens,
            no_stop_trim=True, spaces_between_special_tokens=False)
        self.dp_counts = [0] * (args.sglang_dp_size or 1)
        self.dp_rank = 0
        self.reset()

    def reset(self) -> None:
        self.remaining_batch_size = 0
        self.pendings = set()
        self.aborted = False

    @classmethod
    def clear_instances(cls) -> None:
        cls._instance = None


class _Http:
    """rlrun's stand-in for slime.utils.http_utils: post/get over aiohttp, one session per request
    (rlrun runs each rollout in its own event loop; a session must not outlive its loop)."""

    def init_http_client(self, args) -> None:
        """slime opens its shared client here; the stand-in opens a session per request."""

    @staticmethod
    def _session():
        import aiohttp

        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), trust_env=False)

    async def post(self, url, payload, max_retries=60, headers=None):
        for attempt in range(1, max_retries + 1):
            try:
                async with self._session() as sess, sess.post(url, json=payload or {}, headers=headers) as resp:
                    resp.raise_for_status()
                    return await resp.json(content_type=None)
            except Exception as exc:  # noqa: BLE001 - slime retries every error once a second
                log.info("post %s failed (%s), attempt %d/%d", url, exc, attempt, max_retries)
                if attempt >= max_retries:
                    raise
                await asyncio.sleep(1)

    async def get(self, url):
        async with self._session() as sess, sess.get(url) as resp:
            resp.raise_for_status()
            return await resp.json(content_type=None)


def _slime_or(module: str, name: str | None, stand_in):
    """slime's `module`.`name` (the module itself when name is None), else the stand-in."""
    import importlib

    try:
        mod = importlib.import_module(module)
        found = mod if name is None else getattr(mod, name)
    except ImportError as exc:
        IMPORT_ERRORS[module] = exc
        log.info("slime's %s does not import (%s: %s); slime generate functions get rlrun's stand-in "
                 "(rlrun.agent.slime_compat)", module, type(exc).__name__, exc)
        return stand_in, "rlrun"
    return found, "slime"


IMPORT_ERRORS: dict[str, ImportError] = {}
Sample, _s1 = _slime_or("slime.utils.types", "Sample", _Sample)
GenerateState, _s2 = _slime_or("slime.rollout.sglang_rollout", "GenerateState", _GenerateState)
http_utils, _s3 = _slime_or("slime.utils.http_utils", None, _Http())
# "slime": all three are slime's own; "rlrun": none (slime is not on sys.path); "mixed": see IMPORT_ERRORS
SOURCE = {("slime",) * 3: "slime", ("rlrun",) * 3: "rlrun"}.get((_s1, _s2, _s3), "mixed")


async def post(url, payload, max_retries=60, headers=None):
    """slime.utils.http_utils.post (slime's own when slime is importable)."""
    return await http_utils.post(url, payload, max_retries=max_retries, headers=headers)


async def get(url):
    return await http_utils.get(url)


def init_http_client(args) -> None:
    http_utils.init_http_client(args)


class _PerLoopClient:
    """In place of slime's module-global httpx client (http_utils._http_client): one httpx.AsyncClient
    per event loop, made as slime's init_http_client makes it. slime runs one loop for a whole run;
    rlrun runs each rollout in its own loop (asyncio.run), and an async run's producer thread and an
    evaluation may run two at once, while a client's pooled connections belong to one loop."""

    def __init__(self, make):
        self._make, self._clients = make, {}

    def _client(self):
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            self._clients = {lp: c for lp, c in self._clients.items() if not lp.is_closed()}
            client = self._clients[loop] = self._make()
        return client

    async def post(self, *args, **kwargs):
        return await self._client().post(*args, **kwargs)

    async def get(self, *args, **kwargs):
        return await self._client().get(*args, **kwargs)


def ensure_client(args) -> None:
    """slime's HTTP client, initialised by slime's init_http_client(args) (its connection limit:
    args.sglang_server_concurrency x engines) and then made per event loop (_PerLoopClient)."""
    if isinstance(http_utils, _Http) or isinstance(http_utils._http_client, _PerLoopClient):
        return
    http_utils.init_http_client(args)
    import httpx

    limit = http_utils._client_concurrency
    http_utils._http_client = _PerLoopClient(lambda: httpx.AsyncClient(
        limits=httpx.Limits(max_connections=limit), timeout=httpx.Timeout(None), trust_env=False))
