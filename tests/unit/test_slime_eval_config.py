"""slime's --eval-config (eval datasets with their own sampling, slime's ifbench scorer), and the slime/Megatron flags
that are no-ops for rlrun where slime's behaviour equals rlrun's (--make-vocab-size-divisible-by where the padded
vocabulary is the model's, --no-position-embedding, --log-probs-chunk-size) or that map onto an rlrun setting
(--save-debug-rollout-data)."""
from __future__ import annotations

import textwrap

import pytest

from rlrun.config import load
from rlrun.interop.slime_decode import decode, parse_args
from rlrun.parts.evaluator import dataset_sampling

MULTI_TASK = """\
eval:
  defaults:
    max_response_len: 16384
    top_p: 0.7
  datasets:
    - name: aime
      path: /data/aime.jsonl
      rm_type: deepscaler
      n_samples_per_eval_prompt: 16
      top_k: 20
    - name: ifbench
      path: /data/ifbench.jsonl
      rm_type: ifbench
      n_samples_per_eval_prompt: 1
      top_p: 0.95
"""


def _decode(text: str):
    return decode(parse_args(text.split()))


def test_eval_config_becomes_eval_datasets_with_their_own_sampling(tmp_path):
    path = tmp_path / "multi_task.yaml"
    path.write_text(MULTI_TASK)
    d = _decode(f"--eval-config {path} --eval-prompt-data other /data/other.jsonl --rm-type math")
    assert d.unknown == []
    assert d.values["eval.datasets"] == [
        {"name": "aime", "path": "/data/aime.jsonl", "rm_type": "deepscaler", "n_samples_per_prompt": 16,
         "top_p": 0.7, "top_k": 20, "max_response_len": 16384},
        # slime's own IFBench scorer, run unchanged as an rlrun per-sample reward (response, label, metadata)
        {"name": "ifbench", "path": "/data/ifbench.jsonl",
         "rm_type": "slime.rollout.rm_hub.ifbench:compute_ifbench_reward", "n_samples_per_prompt": 1, "top_p": 0.95,
         "max_response_len": 16384}]
    assert any("wins over --eval-prompt-data" in n for n in d.notes)


def test_eval_config_by_name_and_its_unknown_keys(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(textwrap.dedent("""\
        datasets:
          gsm: {path: /data/gsm.jsonl, input_key: question}
        """))
    d = _decode(f"--eval-config {path}")
    assert d.values["eval.datasets"] == [{"name": "gsm", "path": "/data/gsm.jsonl"}]
    assert [w for _, w in d.unknown] == ["eval config key 'input_key' (dataset 'gsm'): rlrun's eval datasets take "
                                         "name, path, rm_type, n_samples_per_eval_prompt, temperature, top_p, top_k, "
                                         "max_response_len; not carried over"]
    path.write_text("eval: {defaults: {top_p: 0.5}}\n")
    d = _decode(f"--eval-config {path}")
    assert "does not define any datasets" in d.unknown[0][1]


def test_a_dataset_rm_type_unless_a_custom_rm_wins():
    from rlrun.interop.slime_import import _fill_eval_rm_type

    base = {"data": {"rm_type": "math"}}
    v = {"data.rm_type": "deepscaler", "eval.datasets": [{"name": "a", "path": "p"}, {"name": "b", "path": "q",
                                                                                   "rm_type": "gpqa"}]}
    _fill_eval_rm_type(v, base)
    assert [x["rm_type"] for x in v["eval.datasets"]] == ["deepscaler", "gpqa"]
    v = {"data.rm_type": "slime:pkg.rm:reward", "eval.datasets": [{"name": "b", "path": "q", "rm_type": "gpqa"}]}
    _fill_eval_rm_type(v, base)  # slime's async_rm: --custom-rm-path before a dataset's rm_type
    assert v["eval.datasets"][0]["rm_type"] == "slime:pkg.rm:reward"


def test_each_dataset_samples_with_its_own_values_else_the_eval_sections():
    cfg = load(["rollout.top_k=50", "rollout.max_response_len=64", "eval.top_p=0.9",
                "eval.datasets=[{name: a, path: a.jsonl, rm_type: math, top_k: 20, n_samples_per_prompt: 4},"
                "{name: b, path: b.jsonl, rm_type: math}]"])
    a, b = cfg.eval.datasets
    assert (a.top_k, a.n_samples_per_prompt, a.top_p, a.max_response_len) == (20, 4, 0.9, 64)
    assert (b.top_k, b.n_samples_per_prompt, b.top_p) == (50, 1, 0.9)  # derived: eval's, itself rollout's top_k
    req = dataset_sampling(cfg, a).to_json()
    assert (req["top_k"], req["top_p"], req["max_new_tokens"]) == (20, 0.9, 64)
    assert dataset_sampling(cfg, b).to_json()["top_k"] == 50


def test_export_says_what_slime_flags_cannot_carry_per_dataset():
    from rlrun.interop.slime_export import export_config

    text = export_config(["eval.datasets=[{name: a, path: a.jsonl, rm_type: math, top_k: 20}]", "eval.interval=5"])
    assert "eval.datasets[a].top_k=20" in text


@pytest.mark.parametrize("tp, ok", [(2, True), (8, False)])
def test_vocab_padding_is_a_no_op_where_the_padded_vocab_is_the_models(tp, ok):
    # 154880 = 64 * 2 * 1210 (GLM-4.7-Flash at TP 2: no padding); at TP 8, 64 * 8 = 512 does not divide it (302.5)
    d = _decode(f"--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 154880 "
                f"--tensor-model-parallel-size {tp} --make-vocab-size-divisible-by 64")
    flags = [o.flag for o, _ in d.unknown]
    if ok:
        assert "--make-vocab-size-divisible-by" not in flags
        assert any("no change: model.vocab_size=154880 is a multiple of 64 x TP 2" in n for n in d.notes)
    else:
        assert "--make-vocab-size-divisible-by" in flags
        assert any("pad model.vocab_size=154880 to a multiple of 512" in n for n in d.notes)


def test_flags_that_change_nothing_for_rlrun_and_the_debug_rollout_dump():
    d = _decode("--no-position-embedding --log-probs-chunk-size 1024 --data-pad-size-multiplier 64 "
                "--save-debug-rollout-data /tmp/r_{}.pt")
    assert d.unknown == []
    assert d.values["logging.rollout_records"] == "all"
    assert sum("no change" in n for n in d.notes) == 3
