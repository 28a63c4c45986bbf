"""Math answer equivalence: a cheap normalised string match first, then math-verify (sympy).

math-verify (https://github.com/huggingface/Math-Verify) parses LaTeX/plain answers into sympy and
checks equivalence (1/2 == 0.5 == \\frac{1}{2}, set/interval forms, ...). It is the maintained
replacement for the hand-written graders slime carries (grade_answer_mathd / grade_answer_sympy).
It can be slow on adversarial input, so callers that need a hard bound run it in
rlrun.reward.pool's worker processes.
"""

from __future__ import annotations

import re
import threading

_UNITS = re.compile(r"\\text\{\s*[a-zA-Z ]*\}|\\mbox\{[^}]*\}|\^\{?\\circ\}?|\\%|%|\$")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_SPACES = re.compile(r"\s+|\\[,;:! ]|\\quad|\\left|\\right")


def normalize(ans: str) -> str:
    """Conservative normalisation for the fast path: spacing, $, units, \\dfrac, trailing dot."""
    s = _SPACES.sub("", _UNITS.sub("", ans.strip()))
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):  # 1,000 -> 1000
        s = s.replace(",", "")
    return s.rstrip(".").lstrip("+")


def math_equal(pred: str, gold: str, timeout_s: int = 5) -> bool:
    """True when `pred` and `gold` denote the same mathematical answer."""
    if not pred or not gold:
        return False
    p, g = normalize(pred), normalize(gold)
    if p == g:
        return True
    if _NUMBER.fullmatch(p) and _NUMBER.fullmatch(g):  # two plain numbers: no need for sympy
        return abs(float(p) - float(g)) <= 1e-9 * max(1.0, abs(float(g)))
    from math_verify import parse, verify

    # math-verify's own time limit uses SIGALRM, which only the main thread may set; elsewhere
    # (a Ray actor thread) run without it and rely on the worker pool's hard limit instead.
    if threading.current_thread() is not threading.main_thread():
        timeout_s = None
    # Wrap in \boxed{} so both plain ("0.5") and LaTeX ("\frac{1}{2}") answers parse.
    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=timeout_s)
    pred_parsed = parse(f"\\boxed{{{pred}}}", parsing_timeout=timeout_s)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout_s))
