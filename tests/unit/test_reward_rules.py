"""Rule-based rm_types on real-looking model outputs (in-process `score`)."""

import pytest

from rlrun.reward import score
from rlrun.reward.extract import last_boxed

THINK = "<think>Let me compute 1/2 + 0... the answer might be \\boxed{7}</think>"


@pytest.mark.parametrize("response,label,expected", [
    (THINK + " So the result is $\\boxed{\\frac{1}{2}}$.", "0.5", 1.0),  # equivalent forms, after </think>
    (THINK + " So the result is $\\boxed{0.5}$.", "\\frac12", 1.0),
    (THINK + " Final: \\boxed{\\dfrac{1}{2}}", "\\boxed{\\frac{1}{2}}", 1.0),  # boxed label
    (THINK + " Final: \\boxed{3}", "0.5", 0.0),  # wrong answer
    (THINK + " I am not sure.", "7", 0.0),  # no box after </think> (the one inside thinking is ignored)
    ("No thinking tags, answer \\boxed{0.5}", "0.5", 0.0),  # deepscaler needs </think> (slime semantics)
    ("###Response The answer is \\boxed{12}", "12", 1.0),
    (THINK + " \\boxed{2x+1}", "1+2x", 1.0),
    (THINK + " \\boxed{10^{\\circ}}", "10", 1.0),
])
def test_deepscaler(response, label, expected):
    assert score("deepscaler", response, label) == expected


def test_math_grades_the_last_box_anywhere():
    assert score("math", "First \\boxed{1} then corrected: \\boxed{\\sqrt{4}}", "2") == 1.0
    assert score("math", "The answer is 2.", "2") == 0.0  # unboxed
    assert score("math", "<think>hmm</think> \\boxed{(1, 2)}", "(1,2)") == 1.0


def test_dapo_answer_line_plus_minus_one():
    assert score("dapo", "Long reasoning...\nAnswer: 34", "34") == 1.0
    assert score("dapo", "Long reasoning...\nanswer:  $34$", "34.0") == 1.0
    assert score("dapo", "Answer: 35", "34") == -1.0
    assert score("dapo", "Answer: 34" + "x" * 400, "34") == -1.0  # only the last 300 chars count
    assert score("dapo", "no answer line", "34") == -1.0


def test_f1_token_overlap():
    # "the cat sat" vs "cat sat down": after removing "the", 2 common of 2 / 3 -> F1 = 0.8
    assert score("f1", "The cat sat", "cat sat down") == pytest.approx(0.8)
    assert score("f1", "yes", "no") == 0.0 and score("f1", "Yes.", "yes") == 1.0


def test_gpqa_letters():
    assert score("gpqa", "<think>A or B?</think> The answer is (C).", "C") == 1.0
    assert score("gpqa", "I pick B", "C") == 0.0
    assert score("gpqa", "Final answer: b", 1) == 1.0  # label as an index
    meta = {"choices": ["red", "green", "blue"]}
    assert score("gpqa", "The answer is C", "Blue", meta) == 1.0  # label as the choice text
    assert score("gpqa", "answer: J", "J") == 1.0 and score("gpqa", "answer: K", "K") == 0.0


def test_exact_match_and_boxed_prefix():
    assert score("exact_match", " 7\n", "7") == 1.0 and score("exact_match", "77", "7") == 0.0
    assert score("boxed_exact_match", "so \\boxed{7}", "7") == 1.0
    assert score("boxed_f1", "blah \\boxed{Paris France}", "Paris") == pytest.approx(2 / 3)
    assert score("boxed_exact_match", "no box", "7") == 0.0


def test_metadata_rm_type_overrides():
    assert score("f1", "Answer: 3", "3", {"rm_type": "dapo"}) == 1.0


def test_unknown_type_lists_choices():
    with pytest.raises(ValueError, match="rm_type='deepscalr' is unknown; use one of deepscaler"):
        score("deepscalr", "x", "y")


def test_last_boxed_forms():
    assert last_boxed("\\boxed{a{b}c} and \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\fbox{5}") == "5" and last_boxed("$\\boxed 42$") == "42"
    assert last_boxed("\\boxed{unbalanced") is None and last_boxed("nothing") is None


@pytest.mark.parametrize("response,label,want", [
    ("739", "739", 1.0), ("731", "739", 2 / 3), ("", "739", 0.0), ("7390", "739", 3 / 4),
    (" 73 ", "739", 2 / 3), ("937", "739", 1 / 3), ("", "", 1.0),
])
def test_char_match_gives_partial_credit_per_position(response, label, want):
    from rlrun.reward.rules import char_match

    assert char_match(response, label) == pytest.approx(want, abs=1e-12)  # exact fractions of small ints
