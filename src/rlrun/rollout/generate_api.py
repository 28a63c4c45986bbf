"""The generation seam: what a generate function is and how it reaches the engines.

A generate function turns one prompt Sample (``sample.prompt_tokens`` set, ``status`` PENDING)
into one or more finished Samples. It talks to the model only through a ``GenerationHandle``,
token-in / token-out: it sends token ids and gets token ids and their log-probs back, so the ids
that are trained on are exactly the ids that were generated or inserted (nothing is re-tokenised).

    async def my_generate(handle, sample, sampling) -> Sample | list[Sample]

The default, ``single_turn``, is one request per sample (what rlrun has always done). Multi-turn
functions (tools, environments: rlrun.agent) call ``handle.generate`` once per turn, append the
tool/environment tokens with loss mask 0, and keep one entry per response token in
``response_tokens``, ``loss_mask``, ``rollout_logprobs`` (0.0 for inserted tokens) and
``token_versions`` (the policy version that produced each model token; None for inserted ones).

Names resolve through ``GENERATE_FNS`` (a registry: a new built-in is a new entry) or an import
path, ``package.module:function`` or ``path/to/file.py:function`` (``rollout.generate_fn``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from rlrun.data.sample import RoutedExperts, Sample, Status

if TYPE_CHECKING:  # rollout.client imports aiohttp; the type is only named here
    from rlrun.rollout.client import Sampling

# finish reason of one generate call -> Sample status
STATUS_BY_FINISH = {"stop": Status.COMPLETED, "length": Status.TRUNCATED, "abort": Status.ABORTED}


@dataclass(frozen=True)
class Generated:
    """One engine answer: the new token ids, their log-probs under the sampling distribution, why
    it stopped ("stop" | "length" | "abort"), and the weight version that produced them (None:
    the engines' initial weights). token_versions: one version per token when they differ (a
    partial rollout continued under newer weights); None = all ``weight_version``. routed_experts: the
    experts the engine routed every position of input + output (but the last) to, when the rollout asks
    for them (rollout.routing_replay); pass it to append_tokens."""

    token_ids: list[int]
    logprobs: list[float]
    finish: str
    weight_version: int | None
    text: str = ""
    token_versions: list[int | None] | None = None
    routed_experts: RoutedExperts | None = None

    @property
    def versions(self) -> list[int | None]:
        """The policy version of each token (pass it as append_tokens' ``version``)."""
        if self.token_versions is not None:
            return list(self.token_versions)
        return [self.weight_version] * len(self.token_ids)


class GenerationHandle(Protocol):
    """What a generate function may use. ``context_length`` bounds prompt + response tokens,
    ``max_response_len`` the response tokens of one sample (all turns together)."""

    tokenizer: Any
    context_length: int
    max_response_len: int

    async def generate(self, input_ids: list[int], sampling: "Sampling", *, seed: int | None = None) -> Generated:
        ...


GenerateFn = Callable[[GenerationHandle, Sample, "Sampling"], Awaitable["Sample | list[Sample]"]]


def append_tokens(sample: Sample, token_ids: list[int], *, logprobs: list[float] | None = None,
                  trained: bool, version: int | None | list[int | None] = None,
                  routed: RoutedExperts | None = None) -> None:
    """Extend a sample's response by ``token_ids``: model tokens (trained=True: loss mask 1, their
    log-probs and version: one for all, or one per token, ``Generated.versions``) or inserted
    tool/environment tokens (loss mask 0, log-prob 0.0, version None). The four per-token lists
    stay the same length as ``response_tokens``. routed: ``Generated.routed_experts`` of the answer
    whose tokens these are (it covers the whole sequence so far: it replaces the sample's)."""
    n = len(token_ids)
    if logprobs is not None and len(logprobs) != n:
        raise ValueError(f"{n} token ids but {len(logprobs)} log-probs")
    versions = list(version) if isinstance(version, list) else [version] * n
    if len(versions) != n:
        raise ValueError(f"{n} token ids but {len(versions)} versions")
    sample.response_tokens = list(sample.response_tokens) + list(token_ids)
    sample.loss_mask = list(sample.effective_loss_mask[:len(sample.response_tokens) - n]) + [int(trained)] * n
    old = len(sample.response_tokens) - n
    sample.rollout_logprobs = list(sample.rollout_logprobs or [0.0] * old) + list(logprobs or [0.0] * n)
    sample.token_versions = list(sample.token_versions or [None] * old) + [v if trained else None for v in versions]
    if routed is not None:
        fed = len(sample.prompt_tokens) + len(sample.response_tokens) - 1
        if routed.rows != fed:
            raise ValueError(f"routed experts have {routed.rows} rows but the sample has {fed} fed positions (prompt "
                             "+ response - 1): pass the routed experts of the answer to prompt_tokens + response_tokens")
        sample.routed_experts = routed


async def single_turn(handle: GenerationHandle, sample: Sample, sampling: "Sampling") -> Sample:
    """One request with the prompt's token ids; the answer becomes the whole response."""
    out = await handle.generate(list(sample.prompt_tokens), sampling)
    append_tokens(sample, out.token_ids, logprobs=out.logprobs, trained=True, version=out.versions,
                  routed=out.routed_experts)
    sample.response += out.text
    sample.weight_version = out.weight_version
    sample.status = STATUS_BY_FINISH[out.finish]
    return sample


GENERATE_FNS: dict[str, GenerateFn] = {"single_turn": single_turn}


def resolve_generate_fn(spec: str | None) -> GenerateFn:
    """A registry name, ``package.module:function`` or ``path/to/file.py:function``; None = single_turn.
    Raises ValueError with what is missing and how to fix it."""
    if spec is None:
        return single_turn
    if spec in GENERATE_FNS:
        return GENERATE_FNS[spec]
    if ":" not in spec:
        raise ValueError(f"generate function {spec!r} is neither a built-in ({', '.join(sorted(GENERATE_FNS))}) "
                         "nor 'package.module:function' / 'path/to/file.py:function'")
    return load_object(spec, "generate function")


def load_object(spec: str, what: str):
    """``package.module:name`` or ``path/to/file.py:name`` -> the object (rlrun.userfn: the one loader of
    user code); ValueError naming `what` (e.g. "generate function", "data.source class") with the fix."""
    from rlrun.userfn import load

    return load(spec, what)
