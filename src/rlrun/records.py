"""Rollout records: each rollout's samples as one Parquet file, RUN_DIR/rollouts/rollout_000012.parquet.

pandas (`pd.read_parquet(RUN_DIR / "rollouts")`) and DuckDB (`SELECT * FROM 'RUN_DIR/rollouts/*.parquet'`)
read them as one table. logging.rollout_records picks how many samples a rollout keeps:
    none    nothing is written
    sample  the first group of the rollout (its n samples: what the model wrote, and how the rewards differ)
    all     every sample, kept or dropped by dynamic sampling (`rlrun replay` trains from these)
One row per sample; token lists stay lists (int64 / float64, so replay reads the very values that were
trained on); fields without a columnar shape (a chat prompt, the label, turns, metadata) are JSON text.
Multi-turn samples keep sample.metadata["turns"] (rlrun.agent: one dict per turn with its token span,
tool_calls and tool_results) as `turns`, plus `num_turns` and every turn's `tool_calls` / `tool_results`
flattened, so that `WHERE num_turns > 2` or a look at the tool results needs no JSON walking. Imports only pyarrow: `rlrun show` reads records without torch or ray.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from rlrun.data.sample import Sample, Status

RECORDS_DIR = "rollouts"
MODES = ("none", "sample", "all")
# {"mode": ...}: what the run kept, so replay can say when it is not `all`. A leading "_" (and the "."
# of a file being written) keeps pyarrow's dataset reader, pd.read_parquet(dir), from reading it.
META_FILE = "_records.json"

SCHEMA = pa.schema([
    ("rollout_id", pa.int64()), ("index", pa.int64()), ("group_id", pa.int64()),
    ("kept_index", pa.int64()),  # position in the trained batch; -1 = dropped (dynamic sampling)
    ("prompt", pa.string()), ("prompt_tokens", pa.list_(pa.int64())),
    ("response", pa.string()), ("response_tokens", pa.list_(pa.int64())),
    ("loss_mask", pa.list_(pa.int64())), ("rollout_logprobs", pa.list_(pa.float64())),
    ("reward", pa.float64()), ("label", pa.string()), ("status", pa.string()),
    ("weight_version", pa.int64()), ("token_versions", pa.list_(pa.int64())),
    ("num_turns", pa.int64()), ("turns", pa.string()),
    ("tool_calls", pa.string()), ("tool_results", pa.string()),  # every turn's, in order (views of turns)
    ("metadata", pa.string()),
])


def _json(x: Any) -> str | None:
    return None if x is None else json.dumps(x, default=str)


def sample_row(rollout_id: int, index: int, s, kept_index: int) -> dict:
    meta = dict(s.metadata or {})
    turns = meta.pop("turns", None)  # multi-turn rollouts (rlrun.agent): one dict per turn

    def every(key):
        return None if not turns else [x for t in turns if isinstance(t, dict) for x in t.get(key) or []]
    return {
        "rollout_id": rollout_id, "index": index, "group_id": s.group_id, "kept_index": kept_index,
        "prompt": s.prompt if isinstance(s.prompt, str) else json.dumps(s.prompt),
        "prompt_tokens": list(s.prompt_tokens), "response": s.response, "response_tokens": list(s.response_tokens),
        "loss_mask": None if s.loss_mask is None else list(s.loss_mask),
        "rollout_logprobs": None if s.rollout_logprobs is None else [float(x) for x in s.rollout_logprobs],
        "reward": s.reward, "label": _json(s.label), "status": str(getattr(s.status, "value", s.status)),
        "weight_version": s.weight_version, "token_versions": s.token_versions,
        "num_turns": len(turns) if turns else None, "turns": _json(turns),
        "tool_calls": _json(every("tool_calls")), "tool_results": _json(every("tool_results")),
        "metadata": _json(meta),
    }


def select(mode: str, samples: list, n: int) -> list[int]:
    """Indices of the samples a rollout records under `mode`."""
    if mode not in MODES:
        raise ValueError(f"logging.rollout_records={mode!r} is not one of {'|'.join(MODES)}")
    return {"none": [], "sample": list(range(min(n, len(samples)))), "all": list(range(len(samples)))}[mode]


class RecordsWriter:
    """Writes one Parquet file per rollout (atomically: a killed run leaves no half file)."""

    def __init__(self, run_dir: str | Path, mode: str, n_samples_per_prompt: int):
        self.dir = Path(run_dir) / RECORDS_DIR
        self.mode, self.n = mode, n_samples_per_prompt
        select(mode, [], 1)  # fail on a bad mode before the first rollout
        if mode != "none":
            self.dir.mkdir(parents=True, exist_ok=True)
            # a resumed run that records more than before still holds fewer for the first part: keep the least
            kept = min(mode, recorded_mode(run_dir) if (self.dir / META_FILE).exists() else mode, key=MODES.index)
            (self.dir / META_FILE).write_text(json.dumps({"mode": kept, "n_samples_per_prompt": self.n}) + "\n")

    def write(self, rollout_id: int, samples: list, kept: list) -> list[dict]:
        """Records the rollout; returns the rows written (the wandb sample table shows them)."""
        where = {id(s): k for k, s in enumerate(kept)}
        rows = [sample_row(rollout_id, i, samples[i], where.get(id(samples[i]), -1))
                for i in select(self.mode, samples, self.n)]
        if rows:
            path = self.dir / f"rollout_{rollout_id:06d}.parquet"
            tmp = path.with_name(f".{path.name}.tmp")
            pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), tmp)
            tmp.replace(path)
        return rows


def record_files(run_dir: str | Path) -> list[Path]:
    return sorted((Path(run_dir) / RECORDS_DIR).glob("rollout_*.parquet"))


def recorded_mode(run_dir: str | Path) -> str:
    """The logging.rollout_records the run wrote its records with ("none" when it wrote none)."""
    meta = Path(run_dir) / RECORDS_DIR / META_FILE
    return json.loads(meta.read_text())["mode"] if meta.exists() else "none"


def read_rollout(run_dir: str | Path, rollout_id: int) -> list[dict]:
    """The rows of one rollout, in generation order."""
    path = Path(run_dir) / RECORDS_DIR / f"rollout_{rollout_id:06d}.parquet"
    return sorted(pq.read_table(path).to_pylist(), key=lambda r: r["index"])


def to_samples(rows: Iterable[dict]) -> list:
    """Rows -> Samples (the fields the trainer reads are exact; JSON fields are decoded)."""

    out = []
    for r in rows:
        meta = json.loads(r["metadata"]) if r["metadata"] else {}
        if r["turns"] is not None:
            meta["turns"] = json.loads(r["turns"])
        prompt = r["prompt"]
        out.append(Sample(
            prompt=prompt, prompt_tokens=list(r["prompt_tokens"]), response=r["response"],
            response_tokens=list(r["response_tokens"]), loss_mask=r["loss_mask"], reward=r["reward"],
            label=json.loads(r["label"]) if r["label"] is not None else None, rollout_logprobs=r["rollout_logprobs"],
            status=Status(r["status"]), metadata=meta, group_id=r["group_id"], weight_version=r["weight_version"],
            token_versions=r["token_versions"]))
    return out
