"""A reward that fails on every sample stops the run with the first error and its sample (rlrun.parts.sampling.score
-> rlrun.reward.RewardError); a few failing samples score 0 and are counted; the preflight calls a custom reward
once on a real data row (rlrun.launch.preflight.reward_call)."""
from __future__ import annotations

import pytest

from rlrun.config import load
from rlrun.data.sample import Sample
from rlrun.launch.preflight import preflight
from rlrun.parts.sampling import score
from rlrun.reward import RewardError

REWARDS = '''
def two_args(response, label):  # one parameter too few: rlrun calls fn(response, label, metadata)
    return float(response == label)

def picky(response, label, metadata=None):  # fails on any response that is not a digit string
    return float(int(response) == int(label))

def divides(response, label, metadata=None):
    return 1 / 0

class Model:  # a reward class whose __call__ takes the batch
    def __call__(self, responses, labels):
        return [0.0] * len(responses)
'''


@pytest.fixture
def rewards(tmp_path):
    path = tmp_path / "my.py"
    path.write_text(REWARDS)
    return path


def samples(responses):
    return [Sample(prompt=f"p{i}", response=r, label="7", group_id=i // 2) for i, r in enumerate(responses)]


def test_a_reward_failing_on_every_sample_stops_with_the_first_error_and_its_sample(rewards):
    with pytest.raises(RewardError) as e:
        score(samples(["x", "y", "z", "w"]), f"{rewards}:picky", 2)
    msg = str(e.value)
    assert "failed on every one of the 4 samples" in msg, msg
    assert "ValueError: invalid literal for int() with base 10: 'x'" in msg, msg  # the first sample's error
    assert "prompt='p0', response='x', label='7'" in msg, msg


def test_a_few_failing_samples_score_zero_and_are_counted(rewards):
    batch = samples(["x", "7", "3", "y"])
    metrics = score(batch, f"{rewards}:picky", 2)
    assert [s.reward for s in batch] == [0.0, 1.0, 0.0, 0.0]
    assert metrics["reward/errors"] == 2 and metrics["reward/count"] == 4


def cfg(tmp_path, *overrides):
    return load([f"run.output_dir={tmp_path / 'out'}", *overrides])


def test_the_preflight_refuses_a_reward_with_one_argument_too_few(tmp_path, rewards):
    (p,) = preflight(cfg(tmp_path, f"data.rm_type={rewards}:two_args"))
    assert p.path == "data.rm_type" and "takes (response, label)" in p.message, p.message
    assert "two_args(response, label, metadata)" in p.message
    assert "def two_args(response, label, metadata=None)" in p.fix
    (p,) = preflight(cfg(tmp_path, f"data.rm_type={rewards}:Model"))  # a class: its __call__, without building it
    assert p.path == "data.rm_type" and "takes (responses, labels)" in p.message, p.message


def test_the_preflight_calls_the_reward_once_on_a_data_row(tmp_path, rewards):
    data = tmp_path / "d.jsonl"
    data.write_text('{"input": "1+1=", "label": "2", "metadata": {"src": "a"}}\n')
    (p,) = preflight(cfg(tmp_path, f"data.rm_type={rewards}:divides", f"data.prompt_data={data}"))
    assert p.path == "data.rm_type" and "raised ZeroDivisionError: division by zero" in p.message, p.message
    assert f"{data}:1" in p.message and "response='2', label='2', metadata={'src': 'a'}" in p.message, p.message
    assert preflight(cfg(tmp_path, f"data.rm_type={rewards}:picky", f"data.prompt_data={data}")) == []


def test_a_failing_generate_function_names_the_sample_it_failed_on():
    """The run stops at a generate function's first error, as before; the error now carries its sample (a note:
    the exception keeps its type, so the rollout's fault handling sees what it saw before)."""
    from rlrun.rollout.handle import PolicyVersion, generate_samples

    async def broken(handle, sample, sampling):
        raise KeyError("tool registry")

    with pytest.raises(KeyError) as e:  # no request is sent: the function fails first
        generate_samples("http://127.0.0.1:9", load([]).rollout, [Sample(prompt="1+1=", label="2", group_id=3)],
                         None, [0], fn=broken, tokenizer=None, versions=PolicyVersion(), partial=False)
    assert e.value.__notes__ == ["rlrun: the generate function (rollout.generate_fn) failed on the sample of group 3: "
                                 "prompt='1+1=', label='2'"]
