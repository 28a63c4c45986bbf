"""Prompt datasets from JSONL or parquet: keys, chat template, length filter, seeded epochs, resume.

A row holds the prompt under data.input_key (a string or a list of chat messages), the answer
under data.label_key and optional per-row metadata (a dict or a JSON string) under
data.metadata_key. Bad rows raise at load time with `file:line`, the key and the fix, never
later inside a Ray worker. Iteration is a deterministic function of (seed, epoch, position), so
state_dict()/load_state_dict() resume exactly where a run stopped.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class DataError(ValueError):
    """A problem with a data file, with its location (`path:line`) in the message."""


@dataclass(frozen=True)
class PromptItem:
    index: int  # row number in the file (0-based), stable across shuffles
    prompt: str | list[dict]  # as stored in the file
    text: str  # what the engine gets (after the chat template when it applies)
    tokens: list[int]  # tokens of `text` ([] without a tokenizer)
    label: Any
    metadata: dict = field(default_factory=dict)


def read_rows(path: Path):
    """Yield (location, row dict) pairs; location is `path:line` (JSONL) or `path:row N` (parquet)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield f"{path}:row {i}", row
        return
    if path.suffix not in (".jsonl", ".json"):
        raise DataError(f"{path}: unsupported data file type {path.suffix!r}; use .jsonl or .parquet")
    with path.open() as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: not valid JSON ({e.msg} at column {e.colno}); "
                                "each line must be one JSON object") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            yield f"{path}:{lineno}", row


def _check_messages(where: str, key: str, prompt) -> None:
    ok = isinstance(prompt, list) and prompt and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt
    )
    if not ok:
        raise DataError(f"{where}: key {key!r} must be a string or a list of {{'role', 'content'}} messages, "
                        f"got {str(prompt)[:100]!r}")


def row_fields(where: str, row: dict, input_key: str, label_key: str | None,
               metadata_key: str | None) -> tuple[str | list[dict], dict | None]:
    """(prompt, metadata) of one row, or DataError naming the row and the data.* key it lacks or breaks."""
    missing = [f"no key {k!r} ({setting})" for k, setting in ((input_key, "data.input_key"),
                                                             (label_key, "data.label_key")) if k is not None and k not in row]
    if missing:  # both keys at once: a file with other names fails on both
        raise DataError(f"{where}: row has {' and '.join(missing)}; keys: {sorted(row)}"
                        + ("; set data.label_key=null for unlabelled data" if "(data.label_key)" in missing[-1] else ""))
    prompt = row[input_key]
    if not isinstance(prompt, str):
        _check_messages(where, input_key, prompt)
    metadata = row.get(metadata_key) if metadata_key else None
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            raise DataError(f"{where}: key {metadata_key!r} holds a string that is not JSON") from None
    if metadata is not None and not isinstance(metadata, dict):
        raise DataError(f"{where}: key {metadata_key!r} must be an object, got {type(metadata).__name__}")
    return prompt, metadata


def check_file(path: str | Path, input_key: str, label_key: str | None, metadata_key: str | None) -> int:
    """Read every row as PromptDataset does, without a tokenizer: the number of rows, or DataError at the first
    bad one (`path:line`). What the preflight runs before any actor starts."""
    path = Path(path)
    n = 0
    for n, (where, row) in enumerate(read_rows(path), 1):
        row_fields(where, row, input_key, label_key, metadata_key)
    if n == 0:
        raise DataError(f"{path}: no prompts (the file is empty)")
    return n


class PromptDataset:
    """An in-memory prompt list with seeded per-epoch shuffling and a resumable cursor."""

    def __init__(self, path: str | Path, *, input_key: str = "input", label_key: str | None = "label",
                 metadata_key: str | None = "metadata", tokenizer=None, apply_chat_template: bool = False,
                 max_prompt_len: int | None = None, shuffle: bool = True, seed: int = 0, num_epochs: int = 1):
        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(f"{self.path}: data file not found (data.prompt_data)")
        if max_prompt_len is not None and tokenizer is None:
            raise DataError("data.max_prompt_len needs a tokenizer to count prompt tokens")
        if num_epochs < 1:
            raise DataError(f"data.num_epochs={num_epochs} must be >= 1")
        self.shuffle, self.seed, self.num_epochs = shuffle, seed, num_epochs
        self.items: list[PromptItem] = []
        self.num_filtered = 0
        self.num_unk = 0  # prompts with characters the tokenizer does not know (<unk>): counted and logged
        unk = getattr(tokenizer, "unk_token_id", None)
        lengths = []
        for i, (where, row) in enumerate(read_rows(self.path)):
            item = self._parse(i, where, row, input_key, label_key, metadata_key, tokenizer, apply_chat_template)
            lengths.append(len(item.tokens))
            self.num_unk += unk is not None and unk in item.tokens
            if max_prompt_len is not None and len(item.tokens) > max_prompt_len:
                self.num_filtered += 1
                continue
            self.items.append(item)
        if self.num_filtered:
            log.info("%s: dropped %d prompts longer than data.max_prompt_len=%s", self.path, self.num_filtered,
                     max_prompt_len)
        if self.num_unk:
            log.warning("%s: %d of %d prompts hold characters outside the tokenizer's vocabulary (read as <unk>; "
                        "docs/data.md)", self.path, self.num_unk, len(lengths))
        if not lengths:
            raise DataError(f"{self.path}: no prompts (the file is empty)")
        if not self.items:  # every prompt filtered: say by which limit, how many, and what would keep them
            raise DataError(f"{self.path}: no prompts left: all {len(lengths)} are longer than "
                            f"data.max_prompt_len={max_prompt_len} tokens (shortest {min(lengths)}, longest "
                            f"{max(lengths)}, after the chat template when data.apply_chat_template is on)")
        self.epoch, self.position = 0, 0
        self._order = self._epoch_order(0)

    @staticmethod
    def _parse(i, where, row, input_key, label_key, metadata_key, tokenizer, apply_chat_template) -> PromptItem:
        prompt, metadata = row_fields(where, row, input_key, label_key, metadata_key)
        if apply_chat_template:
            if tokenizer is None:
                raise DataError("data.apply_chat_template=true needs a tokenizer")
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            if not getattr(tokenizer, "chat_template", None):
                raise DataError(f"{where}: data.apply_chat_template=true but the tokenizer has no chat template; "
                                "set data.apply_chat_template=false or use a chat model's tokenizer")
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        elif isinstance(prompt, str):
            text = prompt
        else:
            raise DataError(f"{where}: chat messages under {input_key!r} need data.apply_chat_template=true")
        tokens = tokenizer(text, add_special_tokens=False)["input_ids"] if tokenizer is not None else []
        return PromptItem(i, prompt, text, list(tokens), row.get(label_key) if label_key else None,
                          dict(metadata or {}))

    @classmethod
    def from_config(cls, data_cfg, tokenizer=None, seed: int = 0) -> PromptDataset:
        """Build from the config's `data` section (field names in docs/CONTRACT.md) and run.seed."""
        d = data_cfg
        return cls(d.prompt_data, input_key=d.input_key, label_key=d.label_key, metadata_key=d.metadata_key,
                   tokenizer=tokenizer, apply_chat_template=d.apply_chat_template, max_prompt_len=d.max_prompt_len,
                   shuffle=d.shuffle, seed=seed, num_epochs=d.num_epochs)

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.items)))
        if self.shuffle:
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order

    def __len__(self) -> int:
        return len(self.items)

    @property
    def exhausted(self) -> bool:
        return self.epoch >= self.num_epochs

    def next_batch(self, n: int) -> list[PromptItem]:
        """The next n prompts, crossing into the next epoch as needed; fewer (or []) at the end."""
        out: list[PromptItem] = []
        while len(out) < n and not self.exhausted:
            take = self._order[self.position:self.position + n - len(out)]
            out.extend(self.items[j] for j in take)
            self.position += len(take)
            if self.position >= len(self._order):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._epoch_order(self.epoch)
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "size": len(self.items)}

    def load_state_dict(self, state: dict) -> None:
        if state["seed"] != self.seed or state["size"] != len(self.items):
            raise DataError(f"{self.path}: checkpoint data state (seed {state['seed']}, {state['size']} prompts) "
                            f"does not match this dataset (seed {self.seed}, {len(self.items)} prompts); "
                            "resume with the same data and run.seed")
        self.epoch, self.position = state["epoch"], state["position"]
        self._order = self._epoch_order(self.epoch)
