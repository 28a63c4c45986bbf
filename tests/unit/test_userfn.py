"""One loader for every user-code reference (rlrun.userfn): what the preflight accepts, the run loads; what
the run could not load, the preflight reports (with the key) before Ray starts."""
import subprocess
import sys

import pytest

from rlrun.config import ConfigError, load
from rlrun.launch.preflight import preflight
from rlrun.reward import score_batch
from rlrun.userfn import defined_names, problems

REWARD = '''\
import math as _m

def exact(response, label, metadata):
    return float(response.strip() == str(label))

if True:
    class Judge:
        def __call__(self, responses, labels, metadatas):
            return [1.0] * len(responses)
'''


@pytest.fixture
def reward_file(tmp_path):
    f = tmp_path / "my_reward.py"
    f.write_text(REWARD)
    return f


def test_a_file_reference_passes_the_preflight_and_scores(reward_file, tmp_path):
    """data.rm_type=/abs/path/x.py:fn (docs/config.md): accepted by the preflight and loaded by the reward
    code (it used to die in the run: "cannot import module")."""
    cfg = load([f"run.output_dir={tmp_path / 'out'}", f"data.rm_type={reward_file}:exact"])
    assert preflight(cfg) == []
    assert score_batch(f"{reward_file}:exact", ["3", " 4", "5"], ["3", "4", "6"]) == [1.0, 1.0, 0.0]
    assert score_batch(f"{reward_file}:Judge", ["a", "b"], [None, None]) == [1.0, 1.0]


def gate(overrides):
    """The problems `rlrun validate --check-paths` reports: the rules (load), else the preflight."""
    try:
        return preflight(load(overrides))
    except ConfigError as e:
        return e.problems


@pytest.mark.parametrize("key", ["data.rm_type", "rollout.generate_fn"])
def test_every_reference_key_is_refused_before_the_run(reward_file, tmp_path, key):
    """The rules load rollout.generate_fn to check its signature (rlrun.config.agent_rules); the preflight
    checks rm_type without running it. Either way, through the same loader, with the key."""
    cases = {f"{reward_file}:nope": "defines no 'nope' at top level",
             f"{tmp_path}/missing.py:exact": "does not exist",
             "no_such_pkg.rewards:score": "cannot be imported on this machine",
             "json:no_such_fn": "defines no 'no_such_fn'"}
    for spec, why in cases.items():
        found = gate([f"run.output_dir={tmp_path / 'out'}", f"{key}={spec}"])
        assert [p.path for p in found] == [key], found
        if key == "data.rm_type":
            assert why in found[0].message and found[0].value == spec, found[0].message


def test_defined_names_reads_the_top_level_only():
    assert defined_names(REWARD) >= {"exact", "Judge", "_m"}
    assert "x" not in defined_names("def f():\n    x = 1\n")
    assert defined_names("from os.path import *\n") is None          # anything may be defined
    assert defined_names("def __getattr__(name):\n    return 1\n") is None
    assert problems("json:loads") == [] and problems("bad") != []


def test_validate_check_paths_reports_a_missing_function_with_exit_2(reward_file, tmp_path):
    r = subprocess.run([sys.executable, "-m", "rlrun.cli", "validate", "--check-paths",
                        f"run.output_dir={tmp_path / 'out'}", f"data.rm_type={reward_file}:exactt"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "data.rm_type" in r.stderr and "defines no 'exactt'" in r.stderr, r.stderr


def test_a_length_filter_that_leaves_no_prompt_is_reported_with_counts(tmp_path):
    """data=toy sets data.max_prompt_len=16; the toy tokenizer makes one token per character (rlrun.data.toy)."""
    data = tmp_path / "long.jsonl"
    rows = ["1" * n for n in (18, 24, 30)]  # 18, 24 and 30 tokens
    data.write_text("".join(f'{{"input": "{r}", "label": "1"}}\n' for r in rows))
    cfg = load([f"run.output_dir={tmp_path / 'out'}", f"data.prompt_data={data}"])
    assert cfg.data.max_prompt_len == 16
    (p,) = preflight(cfg)
    assert p.path == "data.max_prompt_len" and p.value == 16
    assert "all 3 are longer than data.max_prompt_len=16 tokens (shortest 18, longest 30" in p.message, p.message
    assert "at least 18" in p.fix
    assert preflight(load([f"run.output_dir={tmp_path / 'out'}", f"data.prompt_data={data}",
                           "data.max_prompt_len=18"])) == []  # one prompt left: the run can start


def test_the_preflight_counts_prompts_the_toy_tokenizer_reads_as_unk(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"input": "What is 2+2?", "label": "4"}\n{"input": "2+2=", "label": "4"}\n'
                    '{"input": "3+3=", "label": "6"}\n')  # 'W' is outside the vocabulary (lower case only)
    (p,) = preflight(load([f"run.output_dir={tmp_path / 'out'}", f"data.prompt_data={data}",
                           "data.max_prompt_len=null"]))
    assert p.path == "data.prompt_data" and "1 of 3 prompts hold characters outside the toy tokenizer's" in p.message
    assert "they become <unk>" in p.message and "checkpoint.hf" in p.fix, p


def test_the_preflight_counts_labels_no_response_can_hold_and_names_the_length(tmp_path, capsys):
    data = tmp_path / "d.jsonl"  # the toy tokenizer: one token per character
    data.write_text('{"input": "11+11=", "label": "22"}\n{"input": "1+1=", "label": "2"}\n'
                    '{"input": "50+50=", "label": "100"}\n{"input": "a", "label": "B"}\n')
    base = [f"run.output_dir={tmp_path / 'out'}", f"data.prompt_data={data}"]
    long, spelled = preflight(load(base))  # rollout.max_response_len=1 (conf/data/toy.yaml)
    assert long.path == "rollout.max_response_len" and long.value == 1
    assert "2 of 4 labels (data.label_key=label) are longer than rollout.max_response_len=1 tokens (the longest, " \
        "'100', is 3)" in long.message and "data.rm_type=exact_match scores those prompts 0" in long.message
    assert "at least 3" in long.fix
    assert spelled.path == "data.prompt_data" and "1 of 4 labels hold characters outside" in spelled.message
    (spelled,) = preflight(load([*base, "rollout.max_response_len=3"]))  # the length asked for: only 'B' is left
    assert "1 of 4 labels" in spelled.message
    assert preflight(load([*base, "rollout.max_response_len=3", f"data.rm_type={tmp_path / 'r.py'}:f"]))[0].path \
        == "data.rm_type"  # (no such file) a custom reward: the labels are a note, not a problem
    (tmp_path / "r.py").write_text("def f(response, label, metadata=None):\n    return 0.0\n")
    assert preflight(load([*base, f"data.rm_type={tmp_path / 'r.py'}:f"])) == []
    assert "note: rollout.max_response_len: 2 of 4 labels" in capsys.readouterr().err


def test_both_missing_data_keys_are_reported_at_once(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"question": "1+1=", "answer": "2"}\n')
    problems = preflight(load([f"run.output_dir={tmp_path / 'out'}", f"data.prompt_data={data}"]))
    assert [p.path for p in problems] == ["data.input_key", "data.label_key"]
    assert "no key 'input' (data.input_key) and no key 'label' (data.label_key); keys: ['answer', 'question']" \
        in problems[0].message
