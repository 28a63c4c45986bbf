"""SGLang's native HTTP API, as data: request parsing, response building, weight-sync bodies.

Pure Python (no torch, no ray) so that the client, the hf engine and the sglang engine share one
definition of the wire format. Field names follow sglang 0.5.16 (the pin; unchanged from 0.5.10.post1 for these):
  - /generate request  = sglang.srt.managers.io_struct.GenerateReqInput
  - sampling_params    = sglang.srt.sampling.sampling_params.SamplingParams.__init__
  - finish_reason      = sglang.srt.managers.schedule_batch.FINISH_* .to_json()
  - weight-sync bodies = the *ReqInput dataclasses in io_struct.py
tests/unit/test_rollout_contract.py checks these names against the sglang wheel when it is available
and against the committed snapshot (rollout/engines/sglang/io_struct.json) otherwise.
"""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

DEFAULT_WEIGHT_VERSION = "default"  # what a fresh SGLang server reports (ServerArgs.weight_version)


class RequestError(ValueError):
    """A request body the engine cannot serve; becomes an HTTP 400 with this message."""


@dataclass(frozen=True)
class SamplingParams:
    """The SGLang sampling parameters the hf engine implements (defaults = SGLang's defaults)."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    sampling_seed: int | None = None

    @property
    def greedy(self) -> bool:
        # SGLang treats temperature < 1e-6 as greedy (top_k = 1).
        return self.temperature < 1e-6


# SGLang parameters the hf engine accepts only at their SGLang default (anything else is refused
# instead of being silently ignored).
_INERT_DEFAULTS: dict[str, Any] = {
    "min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
    "min_new_tokens": 0, "n": 1, "json_schema": None, "regex": None, "ebnf": None,
    "structural_tag": None, "stop_regex": None, "spaces_between_special_tokens": True,
    "custom_params": None, "stream_interval": None, "logit_bias": None,
}
_SAMPLING_FIELDS = {f.name for f in dataclasses.fields(SamplingParams)}


def parse_sampling_params(raw: dict | None) -> SamplingParams:
    raw = dict(raw or {})
    problems = []
    for key, value in list(raw.items()):
        if key in _SAMPLING_FIELDS:
            continue
        if key in _INERT_DEFAULTS:
            if value != _INERT_DEFAULTS[key]:
                problems.append(f"sampling_params.{key}={value!r} is not implemented by the hf engine (only the "
                                f"API default {_INERT_DEFAULTS[key]!r}); use a rollout.engine that implements it")
            raw.pop(key)
            continue
        close = difflib.get_close_matches(key, sorted(_SAMPLING_FIELDS | set(_INERT_DEFAULTS)), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        problems.append(f"sampling_params.{key} is not a sampling parameter of the API{hint}")
    if problems:
        raise RequestError("; ".join(problems))
    stop = raw.pop("stop", None)
    stop_ids = raw.pop("stop_token_ids", None)
    for key, types in (("max_new_tokens", int), ("top_k", int), ("temperature", (int, float)),
                       ("top_p", (int, float)), ("sampling_seed", (int, type(None)))):
        if key in raw and (not isinstance(raw[key], types) or isinstance(raw[key], bool)):
            raise RequestError(f"sampling_params.{key}={raw[key]!r} must be a number"
                               f"{' (an integer)' if types is int else ''}")
    if not all(isinstance(t, int) for t in (stop_ids or ())):
        raise RequestError(f"sampling_params.stop_token_ids={stop_ids!r} must be a list of integers")
    if not isinstance(stop, (str, list, tuple, type(None))):
        raise RequestError(f"sampling_params.stop={stop!r} must be a string or a list of strings")
    params = SamplingParams(
        stop=(stop,) if isinstance(stop, str) else tuple(stop or ()),
        stop_token_ids=tuple(stop_ids or ()),
        **raw,
    )
    if params.max_new_tokens < 0:
        raise RequestError(f"sampling_params.max_new_tokens={params.max_new_tokens} must be >= 0")
    if not 0.0 < params.top_p <= 1.0:
        raise RequestError(f"sampling_params.top_p={params.top_p} must be in (0, 1]")
    if params.top_k == 0 or params.top_k < -1:
        raise RequestError(f"sampling_params.top_k={params.top_k} must be -1 (off) or >= 1")
    if params.temperature < 0:
        raise RequestError(f"sampling_params.temperature={params.temperature} must be >= 0")
    return params


@dataclass
class GenerateItem:
    """One prompt of a /generate call after batch expansion."""

    rid: str
    input_ids: list[int] | None
    text: str | None
    sampling: SamplingParams
    return_logprob: bool
    # SGLang's token_ids_logprob: with return_logprob, each output position also reports the log-probs of these ids
    # (meta_info.output_token_ids_logprobs; a discriminative reward engine's yes-token probability)
    token_ids_logprob: list[int] | None = None
    # SGLang's return_routed_experts / routed_experts_start_len: the experts each MoE layer routed every
    # position in [routed_experts_start_len, seqlen - 1) to, in meta_info["routed_experts"]
    return_routed_experts: bool = False
    routed_experts_start_len: int = 0
    # SGLang's logprob_start_len: with return_logprob, meta_info.input_token_logprobs holds the log-prob of every
    # input token from this position on, the first of them None (SGLang computes no logits before the start, so the
    # log-prob of token k needs logprob_start_len <= k - 1); None = no input log-probs
    logprob_start_len: int | None = None


def _expand(value: Any, n: int, name: str, is_batch_value) -> list:
    """SGLang accepts either one value for all prompts or a list with one value per prompt."""
    if is_batch_value(value):
        if len(value) != n:
            raise RequestError(f"{name} has {len(value)} entries but the request has {n} prompts")
        return list(value)
    return [value] * n


def parse_generate_request(body: dict, new_rid) -> tuple[list[GenerateItem], bool]:
    """Returns (items, is_batch). `new_rid()` makes an id for prompts that carry none."""
    if not isinstance(body, dict):
        raise RequestError(f"/generate body must be a JSON object (GenerateReqInput), got {type(body).__name__}")
    text, input_ids = body.get("text"), body.get("input_ids")
    if (text is None) == (input_ids is None):
        raise RequestError("/generate needs exactly one of 'text' or 'input_ids'")
    if body.get("stream"):
        raise RequestError("stream=true is not supported by the hf engine; send stream=false")
    if text is not None:
        is_batch = isinstance(text, list)
        texts, ids = (text if is_batch else [text]), None
        n = len(texts)
    else:
        is_batch = bool(input_ids) and isinstance(input_ids[0], list)
        ids = input_ids if is_batch else [input_ids]
        texts, n = None, len(ids)
    sampling = _expand(body.get("sampling_params"), n, "sampling_params", lambda v: isinstance(v, list))
    logprob = _expand(body.get("return_logprob"), n, "return_logprob", lambda v: isinstance(v, list))
    if is_batch and body.get("rid") is not None and not isinstance(body["rid"], list):
        raise RequestError("a batch request needs rid as a list with one id per prompt (ids must be unique)")
    rids = _expand(body.get("rid"), n, "rid", lambda v: isinstance(v, list))
    probe = _expand(body.get("token_ids_logprob"), n, "token_ids_logprob",
                    lambda v: isinstance(v, list) and bool(v) and isinstance(v[0], list))
    routed, start = body.get("return_routed_experts", False), body.get("routed_experts_start_len", 0)
    if not isinstance(routed, bool):
        raise RequestError(f"return_routed_experts={routed!r} must be true or false")
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise RequestError(f"routed_experts_start_len={start!r} must be a non-negative integer")
    starts = _expand(body.get("logprob_start_len"), n, "logprob_start_len", lambda v: isinstance(v, list))
    for v in starts:
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < -1):
            raise RequestError(f"logprob_start_len={v!r} must be an integer >= 0 (or -1 / null: none)")
    items = [
        GenerateItem(
            rid=rids[i] or new_rid(),
            input_ids=[int(t) for t in ids[i]] if ids is not None else None,
            text=texts[i] if texts is not None else None,
            sampling=parse_sampling_params(sampling[i]),
            return_logprob=bool(logprob[i]),
            token_ids_logprob=[int(t) for t in probe[i]] if probe[i] is not None else None,
            return_routed_experts=routed,
            routed_experts_start_len=start,
            logprob_start_len=None if starts[i] in (None, -1) else starts[i],
        )
        for i in range(n)
    ]
    return items, is_batch


def finish_reason(kind: str, **extra) -> dict:
    """SGLang's finish_reason JSON: {"type": "length"|"stop"|"abort", ...}."""
    if kind == "length":
        return {"type": "length", "length": extra["length"]}
    if kind == "stop":
        return {"type": "stop", "matched": extra["matched"]}
    if kind == "abort":
        return {"type": "abort", "message": extra.get("message", "Aborted"),
                "status_code": None, "err_type": None}
    raise ValueError(f"unknown finish reason kind {kind!r} (length|stop|abort)")


@dataclass
class GenerateResult:
    rid: str
    text: str
    output_ids: list[int]
    prompt_tokens: int
    finish: dict
    logprobs: list[float] | None
    weight_version: str
    token_ids: list[int] | None = None                    # the request's token_ids_logprob
    token_ids_logprobs: list[list[float]] | None = None   # per output position, their log-probs
    routed_experts: str | None = None  # base64 of int32 [rows, layers, top_k] (SGLang's meta_info["routed_experts"])
    input_ids: list[int] | None = None                    # with input_logprobs: the input tokens they score
    input_logprobs: list[float | None] | None = None      # from the request's logprob_start_len on

    def to_json(self) -> dict:
        meta = {
            "id": self.rid,
            "finish_reason": self.finish,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": len(self.output_ids),
            "cached_tokens": 0,
            "weight_version": self.weight_version,
        }
        if self.logprobs is not None:
            # SGLang: (logprob, token_id, token_text or None when return_text_in_logprobs=False)
            meta["output_token_logprobs"] = [[lp, tok, None] for lp, tok in zip(self.logprobs, self.output_ids)]
            meta["output_token_logprobs_length"] = len(self.logprobs)
            if self.token_ids is not None and self.token_ids_logprobs is not None:
                meta["output_token_ids_logprobs"] = [[[lp, tok, None] for lp, tok in zip(row, self.token_ids)]
                                                     for row in self.token_ids_logprobs]
            if self.input_logprobs is not None and self.input_ids is not None:
                start = len(self.input_ids) - len(self.input_logprobs)
                meta["input_token_logprobs"] = [[lp, tok, None] for lp, tok in
                                                zip(self.input_logprobs, self.input_ids[start:])]
        if self.routed_experts is not None:
            meta["routed_experts"] = self.routed_experts
        return {"text": self.text, "output_ids": self.output_ids, "meta_info": meta}


# ---------------------------------------------------------------- weight-sync request bodies
# Each builder returns exactly the JSON body SGLang's endpoint parses into its *ReqInput dataclass.
# Only fields of those dataclasses appear (checked in tests against io_struct.py).

def update_weights_from_disk_body(model_path: str, weight_version: str, *, flush_cache: bool = True,
                                  abort_all_requests: bool = False) -> dict:
    return {"model_path": model_path, "weight_version": weight_version, "flush_cache": flush_cache,
            "abort_all_requests": abort_all_requests}


def update_weights_from_tensor_body(serialized_named_tensors: list[str], weight_version: str, *,
                                    load_format: str | None = None, flush_cache: bool = True) -> dict:
    """serialized_named_tensors: one base64 string per TP rank (SGLang: MultiprocessingSerializer of
    [(name, tensor)], i.e. CUDA IPC handles; hf engine: see rlrun.rollout.weights)."""
    return {"serialized_named_tensors": serialized_named_tensors, "load_format": load_format,
            "flush_cache": flush_cache, "weight_version": weight_version}


def init_weights_update_group_body(master_address: str, master_port: int, rank_offset: int,
                                   world_size: int, *, group_name: str = "weight_update_group",
                                   backend: str = "nccl") -> dict:
    return {"master_address": master_address, "master_port": master_port, "rank_offset": rank_offset,
            "world_size": world_size, "group_name": group_name, "backend": backend}


def update_weights_from_distributed_body(names: list[str], dtypes: list[str], shapes: list[list[int]],
                                         weight_version: str | None, *,
                                         group_name: str = "weight_update_group",
                                         flush_cache: bool = True, load_format: str | None = None) -> dict:
    """load_format None: one broadcast per tensor; "flattened_bucket": one uint8 broadcast of the
    bucket's tensors concatenated in order (SGLang's FlattenedTensorBucket)."""
    return {"names": names, "dtypes": dtypes, "shapes": shapes, "group_name": group_name,
            "flush_cache": flush_cache, "weight_version": weight_version, "load_format": load_format}


def destroy_weights_update_group_body(group_name: str = "weight_update_group") -> dict:
    return {"group_name": group_name}


MEMORY_TAGS = ("weights", "kv_cache", "cuda_graph")


def memory_occupation_body(tags: list[str] | None = None) -> dict:
    """/release_memory_occupation and /resume_memory_occupation; tags None = all of MEMORY_TAGS."""
    bad = [t for t in (tags or []) if t not in MEMORY_TAGS]
    if bad:
        raise RequestError(f"memory tags {bad} unknown; the API knows {list(MEMORY_TAGS)}")
    return {"tags": list(tags) if tags is not None else None}


def pause_generation_body(mode: str = "abort") -> dict:
    if mode not in ("abort", "retract", "in_place"):
        raise RequestError(f"pause mode {mode!r} unknown; the API knows abort|retract|in_place")
    return {"mode": mode}


def abort_request_body(rid: str | None = None, abort_all: bool = False) -> dict:
    if (rid is None) == (not abort_all):
        raise RequestError("abort_request needs either a rid or abort_all=True")
    return {"rid": rid, "abort_all": abort_all}


BODY_BUILDERS = {
    # endpoint -> (builder, sglang io_struct class it must match)
    "/update_weights_from_disk": (update_weights_from_disk_body, "UpdateWeightFromDiskReqInput"),
    "/update_weights_from_tensor": (update_weights_from_tensor_body, "UpdateWeightsFromTensorReqInput"),
    "/init_weights_update_group": (init_weights_update_group_body, "InitWeightsUpdateGroupReqInput"),
    "/update_weights_from_distributed": (update_weights_from_distributed_body,
                                         "UpdateWeightsFromDistributedReqInput"),
    "/destroy_weights_update_group": (destroy_weights_update_group_body, "DestroyWeightsUpdateGroupReqInput"),
    "/release_memory_occupation": (memory_occupation_body, "ReleaseMemoryOccupationReqInput"),
    "/resume_memory_occupation": (memory_occupation_body, "ResumeMemoryOccupationReqInput"),
    "/pause_generation": (pause_generation_body, "PauseGenerationReqInput"),
    "/abort_request": (abort_request_body, "AbortReq"),
}
