"""Batch reward classes (a model-based reward): one instance per process, the whole batch per call."""
import sys
import textwrap

import pytest

from rlrun.reward import score, score_batch

MODULE = textwrap.dedent('''
    class LengthModel:
        built = 0

        def __init__(self):
            type(self).built += 1  # a real one loads its model here, once

        async def __call__(self, responses, labels, metadatas):
            return [len(r) / 10 + (1.0 if r == l else 0.0) for r, l in zip(responses, labels)]

    class Broken:
        def __call__(self, responses, labels, metadatas):
            return [1.0]  # one score for any batch
''')


@pytest.fixture
def rm_module(tmp_path, monkeypatch):
    (tmp_path / "rm_batch_classes.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "rm_batch_classes"
    sys.modules.pop("rm_batch_classes", None)


def test_a_reward_class_scores_the_batch_with_one_instance(rm_module):
    metrics = {}
    out = score_batch(f"{rm_module}:LengthModel", ["ab", "abcd", "x"], ["ab", "zz", "q"], metrics=metrics)
    assert out == pytest.approx([1.2, 0.4, 0.1])  # len/10 (+1 on a match); x/10 is inexact in binary: approx (1e-6 rel)
    assert score(f"{rm_module}:LengthModel", "abc", "abc") == pytest.approx(1.3)
    assert sys.modules[rm_module].LengthModel.built == 1
    assert metrics["reward/errors"] == 0 and metrics["reward/count"] == 3


def test_a_failing_reward_class_scores_zero_and_is_counted(rm_module):
    metrics = {}
    assert score_batch(f"{rm_module}:Broken", ["a", "b"], ["a", "b"], metrics=metrics) == [0.0, 0.0]
    assert metrics["reward/errors"] == 2
