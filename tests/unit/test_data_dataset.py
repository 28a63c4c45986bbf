"""PromptDataset: JSONL/parquet, keys, chat template, length filter, seeded epochs, resume, errors."""

import json

import pytest

from rlrun.data import DataError, PromptDataset
from rlrun.data.toy import build_toy_tokenizer


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def tok():
    return build_toy_tokenizer()


def test_jsonl_keys_labels_metadata(tmp_path):
    p = write_jsonl(tmp_path / "d.jsonl", [
        {"prompt": "12=", "answer": "2", "meta": {"src": "a"}},
        {"prompt": "34=", "answer": 4, "meta": '{"src": "b"}'},  # metadata as a JSON string
    ])
    ds = PromptDataset(p, input_key="prompt", label_key="answer", metadata_key="meta", shuffle=False)
    items = ds.next_batch(2)
    assert [(i.text, i.label, i.metadata) for i in items] == [("12=", "2", {"src": "a"}), ("34=", 4, {"src": "b"})]


def test_parquet_matches_jsonl(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"input": f"{i}=", "label": str(i)} for i in range(5)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    a = PromptDataset(tmp_path / "d.parquet", metadata_key=None, seed=3)
    b = PromptDataset(write_jsonl(tmp_path / "d.jsonl", rows), metadata_key=None, seed=3)
    assert [i.text for i in a.next_batch(5)] == [i.text for i in b.next_batch(5)]


def test_missing_key_names_file_line_and_key(tmp_path):
    p = write_jsonl(tmp_path / "bad.jsonl", [{"input": "1=", "label": "1"}, {"input": "2=", "lbl": "2"}])
    with pytest.raises(DataError, match=r"bad.jsonl:2: row has no key 'label' \(data.label_key\); keys: \['input', 'lbl'\]"):
        PromptDataset(p)


def test_bad_json_names_line(tmp_path):
    p = write_jsonl(tmp_path / "bad.jsonl", [{"input": "1=", "label": "1"}, '{"input": "2=", "label"'])
    with pytest.raises(DataError, match=r"bad.jsonl:2: not valid JSON"):
        PromptDataset(p)


def test_bad_messages_and_parquet_row(tmp_path):
    p = write_jsonl(tmp_path / "m.jsonl", [{"input": [{"role": "user"}], "label": "1"}])
    with pytest.raises(DataError, match=r"m.jsonl:1: key 'input' must be a string or a list"):
        PromptDataset(p)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"input": "1=", "label": "1"}, {"input": None, "label": "2"}]),
                   tmp_path / "x.parquet")
    with pytest.raises(DataError, match=r"x.parquet:row 1: key 'input'"):
        PromptDataset(tmp_path / "x.parquet")


def test_chat_template_and_length_filter(tmp_path, tok):
    p = write_jsonl(tmp_path / "c.jsonl", [
        {"input": [{"role": "user", "content": "12="}], "label": "2"},
        {"input": "123456789=", "label": "9"},
    ])
    ds = PromptDataset(p, tokenizer=tok, apply_chat_template=True, max_prompt_len=5, shuffle=False)
    assert len(ds) == 1 and ds.num_filtered == 1
    item = ds.next_batch(1)[0]
    assert item.text == "12=" and item.tokens == tok("12=", add_special_tokens=False)["input_ids"]
    with pytest.raises(DataError, match="need data.apply_chat_template=true"):
        PromptDataset(p, tokenizer=tok)
    plain = build_toy_tokenizer()
    plain.chat_template = None
    with pytest.raises(DataError, match=r"c.jsonl:1: data.apply_chat_template=true but the tokenizer has no chat"):
        PromptDataset(p, tokenizer=plain, apply_chat_template=True)


def test_seeded_shuffle_epochs_and_resume(tmp_path):
    p = write_jsonl(tmp_path / "e.jsonl", [{"input": str(i), "label": str(i)} for i in range(5)])
    ds = PromptDataset(p, seed=7, num_epochs=2)
    first = [i.index for i in ds.next_batch(3)]
    state = ds.state_dict()
    rest = [i.index for i in ds.next_batch(100)]
    assert len(rest) == 7 and ds.exhausted and ds.next_batch(1) == []
    assert sorted(first + rest[:2]) == list(range(5)) and sorted(rest[2:]) == list(range(5))
    assert rest[2:] != first + rest[:2]  # epoch 2 has its own order
    again = PromptDataset(p, seed=7, num_epochs=2)
    assert [i.index for i in again.next_batch(3)] == first  # same seed, same order
    resumed = PromptDataset(p, seed=7, num_epochs=2)
    resumed.load_state_dict(state)
    assert [i.index for i in resumed.next_batch(100)] == rest
    with pytest.raises(DataError, match="resume with the same data and run.seed"):
        PromptDataset(p, seed=8).load_state_dict(state)


def test_from_config_uses_data_section(tmp_path):
    from types import SimpleNamespace

    p = write_jsonl(tmp_path / "f.jsonl", [{"q": "1=", "a": "1"}])
    cfg = SimpleNamespace(prompt_data=str(p), input_key="q", label_key="a", metadata_key="metadata",
                          apply_chat_template=False, max_prompt_len=None, shuffle=True, num_epochs=1)
    assert PromptDataset.from_config(cfg, seed=1).next_batch(1)[0].label == "1"
