"""Supervised fine-tuning samples (algo.loss_type=sft_loss): a data row -> one Sample whose response tokens
carry the loss mask, as slime's SFT rollout function builds them (slime/rollout/sft_rollout.py with
slime/utils/mask_utils.py MultiTurnLossMaskGenerator).

Two row shapes (docs/data.md):
* a prompt string with a label (data.label_key): the response is the label's tokens, all trained; nothing is
  appended (put an end-of-turn / EOS into the label when the model should learn to stop);
* a conversation, a list of {role, content} messages under data.input_key (needs data.apply_chat_template):
  the assistant messages are trained, everything else (system, user, tool messages, and the template's
  generation header before each assistant message) is context. The spans come from rendering the prefixes
  of the conversation with the tokenizer's chat template, which must render a prefix of the conversation as
  a prefix of its tokens (templates that rewrite earlier turns, e.g. Qwen3 dropping earlier reasoning, are
  refused with the row named).
As in slime, the response starts at the first trained token; the tokens before it are the prompt.
"""
from __future__ import annotations

from rlrun.data.dataset import DataError, PromptItem
from rlrun.data.sample import Sample, Status

TRAINED_ROLE = "assistant"


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _render(tokenizer, messages: list[dict], generation_prompt: bool) -> list[int]:
    if not messages:
        return []
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    return _encode(tokenizer, text)


def conversation_tokens(messages: list[dict], tokenizer, where: str = "row") -> tuple[list[int], list[int]]:
    """(tokens, loss mask) of a whole conversation: 1 on the tokens of assistant messages."""
    tokens: list[int] = []
    mask: list[int] = []

    def extend(upto: list[int], value: int, i: int) -> None:
        if upto[:len(tokens)] != tokens:
            raise DataError(f"{where}: the chat template renders messages[:{i + 1}] with other tokens before "
                            f"message {i} than messages[:{i}] (it rewrites earlier turns), so the assistant spans "
                            "cannot be cut out; use a template that renders each prefix as a prefix, or one "
                            "prompt/label pair per row")
        mask.extend([value] * (len(upto) - len(tokens)))
        tokens.extend(upto[len(tokens):])

    for i, m in enumerate(messages):
        if m.get("role") == TRAINED_ROLE:
            extend(_render(tokenizer, messages[:i], True), 0, i)  # the generation header is context
        extend(_render(tokenizer, messages[:i + 1], False), int(m.get("role") == TRAINED_ROLE), i)
    return tokens, mask


def sft_sample(item: PromptItem, tokenizer, group_id: int) -> Sample:
    """One data row as a trained Sample (reward 0, completed; group of one)."""
    where = f"data row {item.index}"
    if isinstance(item.prompt, list):
        tokens, mask = conversation_tokens(item.prompt, tokenizer, where)
    else:
        if item.label is None:
            raise DataError(f"{where}: an SFT row with a prompt string needs its response under data.label_key "
                            "(or a conversation of messages under data.input_key)")
        response = _encode(tokenizer, str(item.label))
        tokens, mask = list(item.tokens) + response, [0] * len(item.tokens) + [1] * len(response)
    if 1 not in mask:
        raise DataError(f"{where}: nothing to train on (no assistant message, or an empty response)")
    first = mask.index(1)
    return Sample(prompt=item.prompt, prompt_tokens=tokens[:first], response_tokens=tokens[first:],
                  loss_mask=mask[first:], reward=0.0, label=item.label, status=Status.COMPLETED,
                  metadata=dict(item.metadata), group_id=group_id)
