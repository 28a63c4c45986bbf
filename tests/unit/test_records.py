"""Rollout records: one Parquet file per rollout that pandas and DuckDB read, and that round-trips the
fields the trainer reads exactly (replay depends on it)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlrun.data.sample import Sample, Status
from rlrun.records import RecordsWriter, read_rollout, recorded_mode, to_samples


def _samples(n_groups=3, n=2):
    out = []
    for g in range(n_groups):
        for k in range(n):
            out.append(Sample(
                prompt=f"p{g}", prompt_tokens=[1, 2, g], response=f"r{g}{k}", response_tokens=[3, 4 + k, 5],
                loss_mask=[1, 0, 1], reward=float(k), label=str(g), rollout_logprobs=[-0.1, -0.2 - k, -1 / 3],
                status=Status.COMPLETED if k == 0 else Status.TRUNCATED, group_id=g, weight_version=7,
                token_versions=[7, None, 7],
                metadata={"turns": [{"role": "assistant", "token_start": 0, "token_end": 2,
                                     "tool_calls": [{"name": "calc", "arguments": {"x": 1}}],
                                     "tool_results": [{"output": "42", "error": None}], "error": None},
                                    {"role": "observation", "token_start": 2, "token_end": 3, "tool_calls": [],
                                     "tool_results": [], "error": None}], "source": "toy"}))
    return out


def test_all_keeps_every_sample_with_its_trained_position(tmp_path):
    samples = _samples()
    kept = samples[2:4] + samples[0:2]  # dynamic sampling may keep groups out of generation order
    rows = RecordsWriter(tmp_path, "all", 2).write(12, samples, kept)
    assert (tmp_path / "rollouts" / "rollout_000012.parquet").is_file()
    assert recorded_mode(tmp_path) == "all"
    back = read_rollout(tmp_path, 12)
    assert len(rows) == len(back) == 6
    assert [r["kept_index"] for r in back] == [2, 3, 0, 1, -1, -1]
    r = back[1]
    assert (r["prompt_tokens"], r["response_tokens"], r["loss_mask"]) == ([1, 2, 0], [3, 5, 5], [1, 0, 1])
    assert r["rollout_logprobs"] == [-0.1, -1.2, -1 / 3]  # float64: the exact Python floats
    assert (r["reward"], r["status"], r["weight_version"], r["token_versions"]) == (1.0, "truncated", 7, [7, None, 7])
    assert r["num_turns"] == 2 and json.loads(r["turns"])[1]["role"] == "observation"
    assert json.loads(r["tool_calls"]) == [{"name": "calc", "arguments": {"x": 1}}]
    assert json.loads(r["tool_results"]) == [{"output": "42", "error": None}]
    assert json.loads(r["metadata"]) == {"source": "toy"}
    (back,) = to_samples([r])
    assert back.metadata == samples[1].metadata  # turns come back whole; the flat columns are views


def test_sample_keeps_the_first_group_and_none_writes_nothing(tmp_path):
    RecordsWriter(tmp_path / "s", "sample", 2).write(0, _samples(), _samples())
    assert [r["index"] for r in read_rollout(tmp_path / "s", 0)] == [0, 1]
    w = RecordsWriter(tmp_path / "n", "none", 2)
    assert w.write(0, _samples(), []) == []
    assert not (tmp_path / "n" / "rollouts").exists() and recorded_mode(tmp_path / "n") == "none"


def test_a_resume_that_records_more_keeps_the_lesser_mode(tmp_path):
    RecordsWriter(tmp_path, "sample", 2)
    RecordsWriter(tmp_path, "all", 2)  # resumed with logging.rollout_records=all
    assert recorded_mode(tmp_path) == "sample"  # its first rollouts still hold one group: no replay


def test_bad_mode_fails_at_once(tmp_path):
    with pytest.raises(ValueError, match="none|sample|all"):
        RecordsWriter(tmp_path, "most", 2)


def test_pandas_and_duckdb_read_the_records_as_one_table(tmp_path):
    pd = pytest.importorskip("pandas")
    duckdb = pytest.importorskip("duckdb")
    w = RecordsWriter(tmp_path, "all", 2)
    for rid in range(3):
        w.write(rid, _samples(), [])
    df = pd.read_parquet(tmp_path / "rollouts")
    assert len(df) == 18 and sorted(df["rollout_id"].unique()) == [0, 1, 2]
    got = duckdb.sql(f"SELECT rollout_id, avg(reward) AS r, count(*) AS n FROM '{tmp_path}/rollouts/*.parquet' "
                     "GROUP BY rollout_id ORDER BY rollout_id").fetchall()
    assert got == [(0, 0.5, 6), (1, 0.5, 6), (2, 0.5, 6)]  # rewards 0,1 per group: mean exactly 0.5


floats = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**40), floats), min_size=1, max_size=8), floats,
       st.text(max_size=20), st.one_of(st.text(max_size=10), st.integers(), st.none()))
def test_round_trip_is_exact(tmp_path_factory, toks, reward, response, label):
    d = tmp_path_factory.mktemp("rt")
    s = Sample(prompt=[{"role": "user", "content": "hi"}], prompt_tokens=[9], response=response,
               response_tokens=[t for t, _ in toks], loss_mask=[1] * len(toks), reward=reward, label=label,
               rollout_logprobs=[lp for _, lp in toks], status=Status.COMPLETED, group_id=0, weight_version=None)
    RecordsWriter(d, "all", 1).write(0, [s], [s])
    (back,) = to_samples(read_rollout(d, 0))
    assert back.to_dict() == {**s.to_dict(), "prompt": json.dumps(s.prompt)}  # a chat prompt comes back as JSON
