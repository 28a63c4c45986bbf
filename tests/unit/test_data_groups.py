"""Sample, groups, dynamic-sampling filter with over-sampling, partial-rollout buffer, toy task."""

import pytest

from rlrun.data import GroupCollector, PartialRolloutBuffer, PromptItem, Sample, Status, groups_of, make_group
from rlrun.data.toy import TOY_TASKS, TOY_VOCAB_SIZE, build_toy_tokenizer, toy_dataset, write_toy_jsonl


def group(gid, rewards, status=Status.COMPLETED):
    return [Sample(prompt="p", reward=r, group_id=gid, status=status) for r in rewards]


def test_make_and_split_groups():
    item = PromptItem(0, "1=", "1=", [5, 18], "1", {"k": 1})
    g = make_group(item, 3, group_id=4) + make_group(item, 3, group_id=5)
    assert [s.group_id for s in g] == [4, 4, 4, 5, 5, 5] and g[0].prompt_tokens == [5, 18]
    assert g[0].metadata is not g[1].metadata  # each sample owns its metadata
    assert [[s.group_id for s in grp] for grp in groups_of(g)] == [[4, 4, 4], [5, 5, 5]]
    # a generate function may return any number per prompt: runs of one id, in order, sizes kept
    odd = group(7, [1]) + group(2, [0, 1, 1, 0]) + group(7, [0, 0])
    assert [(grp[0].group_id, len(grp)) for grp in groups_of(odd)] == [(7, 1), (2, 4), (7, 2)]
    assert groups_of([]) == []


def test_dynamic_sampling_drops_zero_std_groups_and_over_samples():
    c = GroupCollector(target=2)
    assert c.prompts_to_request(4) == 4
    c.add([group(0, [1, 1]), group(1, [0, 1]), group(2, [0, 0])])
    assert not c.done and c.prompts_to_request(1) == 1
    c.add([group(3, [1, 0]), group(4, [0.5, 0.2])])
    kept, surplus = c.take()
    assert [g[0].group_id for g in kept] == [1, 3] and [g[0].group_id for g in surplus] == [4]
    assert c.metrics() == {"dynamic_sampling/generated_groups": 5, "dynamic_sampling/dropped_groups": 2,
                           "dynamic_sampling/rounds": 2, "dynamic_sampling/drop_rate": 0.4}


def test_collector_without_filter_and_early_take():
    c = GroupCollector(target=2, keep=None)
    c.add([group(0, [1, 1])])
    with pytest.raises(RuntimeError, match="only 1 of 2 groups"):
        c.take()


def test_partial_rollout_buffer_fifo_and_state():
    buf = PartialRolloutBuffer()
    buf.add([group(0, [None, None], Status.ABORTED), group(1, [1, 0]), group(2, [None], Status.ABORTED)])
    assert len(buf) == 2  # the finished group needs no resuming
    state = buf.state_dict()
    assert [g[0].group_id for g in buf.pop(1)] == [0]
    restored = PartialRolloutBuffer()
    restored.load_state_dict(state)
    assert [g[0].group_id for g in restored.pop(5)] == [0, 2]
    assert restored.pop(1) == [] and isinstance(state["groups"][0][0]["status"], str)


def test_sample_round_trip():
    s = Sample(prompt="x", response_tokens=[1, 2], status=Status.TRUNCATED, weight_version=3)
    assert Sample.from_dict(s.to_dict()) == s
    assert s.effective_loss_mask == [1, 1] and s.response_length == 2


def test_toy_tokenizer_is_character_level_and_small():
    tok = build_toy_tokenizer()
    assert len(tok) <= TOY_VOCAB_SIZE == 64
    ids = tok("73+4=", add_special_tokens=False)["input_ids"]
    assert len(ids) == 5 and tok.decode(ids) == "73+4="
    assert tok.decode(ids + [tok.eos_token_id], skip_special_tokens=True) == "73+4="
    assert tok.apply_chat_template([{"role": "user", "content": "12="}], tokenize=False) == "12="


@pytest.mark.parametrize("task", list(TOY_TASKS))
def test_toy_tasks_are_deterministic_and_correct(task, tmp_path):
    rows = toy_dataset(50, seed=1, task=task)
    assert rows == toy_dataset(50, seed=1, task=task) and rows != toy_dataset(50, seed=2, task=task)
    for r in rows:
        digits = r["input"].rstrip("=")
        expected = {"echo": digits[-1:], "last": digits[-1:], "first": digits[:1], "max": max(digits),
                    "add": str(sum(int(x) for x in digits.split("+")) % 10) if "+" in digits else None,
                    "copy": digits, "reverse": digits[::-1]}[task]
        assert r["label"] == expected
    path = write_toy_jsonl(tmp_path / "t.jsonl", 10, 0, task)
    from rlrun.data import PromptDataset

    assert len(PromptDataset(path)) == 10


def test_unknown_toy_task():
    with pytest.raises(ValueError, match="use one of echo, last"):
        toy_dataset(1, 0, "sort")
