"""Toy task for the embedded CPU default: a character-level tokenizer and tiny digit tasks.

Why: `rlrun` with no arguments must run a real GRPO loop on a 2-core CPU in minutes, from a
random-init tiny model, without downloading anything. The tasks have a one-character answer and
an exact-match reward, so a 2-layer model learns them in a few dozen GRPO steps (see
docs/data.md for the measured curves).

Tasks (prompt -> label):
    echo   "73915"  -> "5"   repeat the last prompt token (easiest; the default)
    last   "73915=" -> "5"   last digit (the model must look one token back)
    first  "73915=" -> "7"   first digit
    max    "73915=" -> "9"   largest digit (needs attention over the whole prompt)
    add    "3+4="   -> "7"   (a + b) mod 10 of two digits (hardest)
Multi-token tasks (use rm_type char_match for partial credit and rollout.max_response_len = the
answer's length, so that the model need not learn to stop):
    copy    "739="  -> "739"  the prompt's three digits
    reverse "739="  -> "937"  the prompt's three digits reversed
The reward (rm_type exact_match) compares the decoded response (special tokens skipped, whitespace
stripped) with the label. Measured with rlrun.data.toy_grpo (tiny Qwen3, random init, GRPO, 8x8
samples per step; docs/data.md): with rollout.max_response_len=1 and lr 4e-3, `echo` passes a
mean reward of 0.5 after ~27 steps and ends at 0.85-0.91 after 40; `last`/`first` need ~100
steps at lr 3e-3. With 2+ response tokens the model must also learn to stop (<eos>), which none
of the tasks learns within 150 steps: keep max_response_len=1 for the few-minute CPU default.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
CHARS = "0123456789 +-*=:?" + "abcdefghijklmnopqrstuvwxyz"
TOY_VOCAB_SIZE = 64  # the tiny model's embedding size; the tokenizer uses len(SPECIAL_TOKENS) + len(CHARS) = 47
# The toy task uses raw prompts: the chat template only joins message contents, so that
# data.apply_chat_template=true and =false give the same tokens.
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def build_toy_tokenizer():
    """A transformers PreTrainedTokenizerFast, one token per character, built offline."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + tuple(CHARS))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # join characters back without inserting spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _digits(rng: random.Random, lo: int, hi: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(lo, hi)))


def _echo(rng):
    s = _digits(rng, 3, 6)
    return s, s[-1]


def _last(rng):
    s = _digits(rng, 3, 6)
    return f"{s}=", s[-1]


def _first(rng):
    s = _digits(rng, 3, 6)
    return f"{s}=", s[0]


def _max(rng):
    s = _digits(rng, 3, 6)
    return f"{s}=", max(s)


def _add(rng):
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return f"{a}+{b}=", str((a + b) % 10)


def _copy(rng):
    s = _digits(rng, 3, 3)
    return f"{s}=", s


def _reverse(rng):
    s = _digits(rng, 3, 3)
    return f"{s}=", s[::-1]


TOY_TASKS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "echo": _echo, "last": _last, "first": _first, "max": _max, "add": _add, "copy": _copy, "reverse": _reverse,
}


def toy_dataset(n: int, seed: int, task: str = "echo") -> list[dict]:
    """n rows {"input", "label", "metadata": {"task"}}, deterministic for a (seed, task)."""
    if task not in TOY_TASKS:
        raise ValueError(f"toy task {task!r} is unknown; use one of {', '.join(TOY_TASKS)}")
    rng = random.Random(f"{task}:{seed}")
    rows = []
    for _ in range(n):
        prompt, label = TOY_TASKS[task](rng)
        rows.append({"input": prompt, "label": label, "metadata": {"task": task}})
    return rows


def write_toy_jsonl(path: str | Path, n: int, seed: int, task: str = "echo") -> Path:
    """Write toy_dataset(n, seed, task) as JSONL (input/label/metadata keys) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in toy_dataset(n, seed, task):
            f.write(json.dumps(row) + "\n")
    return path
