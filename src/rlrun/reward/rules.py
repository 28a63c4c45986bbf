"""Rule-based reward types (rm_type), with slime's semantics (slime/rollout/rm_hub/*).

    deepscaler   text after the last </think> (none -> 0); last \\boxed{} == label -> 1 else 0
    math         last \\boxed{} of the whole response == label (label may be boxed) -> 1 else 0
    dapo         last 300 chars, last "Answer: X" line == label -> +1 else -1 (DAPO's acc-style score)
    f1           SQuAD token F1 between response and label (articles/punctuation/case removed)
    gpqa         chosen option letter (A-J) == label letter (or label index / choice text) -> 1 else 0
    exact_match  response.strip() == label.strip() -> 1 else 0
    char_match   characters equal at the same position / the longer length (partial credit)
    random       0 or 1 uniformly (a smoke-test reward, as in slime)
A `boxed_` prefix (e.g. boxed_f1) first replaces the response by its last \\boxed{} content.
Equivalence uses math-verify (rlrun.reward.mathgrade) instead of a hand-written grader.
"""

from __future__ import annotations

import random
import re
import string
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from rlrun.config.kinds import REWARDS, resolve
from rlrun.reward.extract import last_boxed, strip_thinking
from rlrun.reward.mathgrade import math_equal, normalize


def _label_answer(label) -> str:
    text = str(label)
    return (last_boxed(text) or text) if "\\boxed" in text else text


def deepscaler(response: str, label, metadata=None) -> float:
    solution = strip_thinking(response)
    if solution is None:  # slime also accepts "###Response" as the separator
        head, sep, solution = response.partition("###Response")
        if not sep:
            return 0.0
    answer = last_boxed(solution)
    gold = _label_answer(label)
    return float(answer is not None and gold != "" and math_equal(answer, gold))


def math(response: str, label, metadata=None) -> float:
    answer = last_boxed(response)
    gold = _label_answer(label)
    return float(answer is not None and gold != "" and math_equal(answer, gold))


_DAPO_ANSWER = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")
_BOXED_WRAP = re.compile(r"^\\boxed\{(.*)\}$")
_TEXT_WRAP = re.compile(r"\\text\{(.*?)\}")


def _dapo_normalize(ans: str) -> str:
    """Minerva-style final-answer normalisation (the subset DAPO's integer answers need)."""
    s = ans.split("=")[-1].strip()
    s = _TEXT_WRAP.sub(r"\1", _BOXED_WRAP.sub(r"\1", s))
    s = normalize(s).replace(",", "") if re.fullmatch(r"[\d,.\s$]+", s) else normalize(s)
    return s


def dapo(response: str, label, metadata=None) -> float:
    matches = _DAPO_ANSWER.findall(response[-300:])
    pred = _dapo_normalize(matches[-1]) if matches else "[INVALID]"
    gold = _dapo_normalize(str(label))
    try:  # DAPO's labels are integers: compare "34.0" and "34" as the same
        gold = str(int(float(gold))) if float(gold).is_integer() else gold
    except ValueError:
        pass
    return 1.0 if pred == gold else -1.0


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def _squad_normalize(s: str) -> str:
    return " ".join(_ARTICLES.sub(" ", s.lower().translate(_PUNCT)).split())


def f1(response: str, label, metadata=None) -> float:
    pred, gold = _squad_normalize(response), _squad_normalize(str(label))
    if (pred in ("yes", "no", "noanswer") or gold in ("yes", "no", "noanswer")) and pred != gold:
        return 0.0
    common = Counter(pred.split()) & Counter(gold.split())
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred.split()), same / len(gold.split())
    return 2 * precision * recall / (precision + recall)


_GPQA_PATTERNS = [
    re.compile(r"(?:answer|option|choice)\s*(?:is|:)?\s*\(?([A-Z])\b", re.IGNORECASE),
    re.compile(r"\b([A-Z])\)?\s*is\s*(?:the\s*)?correct", re.IGNORECASE),
]
_LETTER = re.compile(r"\b([A-Z])\b")


def _gpqa_gold(label, metadata: dict, letters: list[str]) -> str | None:
    if isinstance(metadata.get("correct_letter"), str):
        return metadata["correct_letter"].strip().upper()
    if isinstance(label, (int, float)) and not isinstance(label, bool):
        return letters[int(label)] if 0 <= int(label) < len(letters) else None
    text = str(label).strip()
    if len(text) == 1 and text.upper() in letters:
        return text.upper()
    norm = lambda x: re.sub(r"[^a-z0-9]+", " ", str(x).lower()).strip()  # noqa: E731
    for letter, choice in zip(letters, metadata.get("choices") or []):
        if norm(choice) == norm(text):
            return letter
    return None


def gpqa(response: str, label, metadata=None) -> float:
    metadata = metadata or {}
    choices = metadata.get("choices")
    letters = [str(x).upper() for x in metadata.get("valid_letters") or []] or list(
        string.ascii_uppercase[: len(choices) if choices else 10]
    )
    gold = _gpqa_gold(label, metadata, letters)
    text = strip_thinking(response)
    text = response if text is None else text
    pred = None
    for pattern in _GPQA_PATTERNS:
        m = pattern.search(text)
        if m and m.group(1).upper() in letters:
            pred = m.group(1).upper()
            break
    if pred is None:  # fallback: the last standalone valid capital letter
        pred = next((x for x in reversed(_LETTER.findall(text)) if x in letters), None)
    return float(gold is not None and pred == gold)


def exact_match(response: str, label, metadata=None) -> float:
    return float(response.strip() == str(label).strip())


def char_match(response: str, label, metadata=None) -> float:
    """Partial credit for string answers: characters equal at the same position, over the longer of
    the two (stripped), so that a missing, wrong or extra character each costs 1/len."""
    got, want = response.strip(), str(label).strip()
    width = max(len(got), len(want))
    return 1.0 if width == 0 else sum(a == b for a, b in zip(got, want)) / width


def random_reward(response: str, label, metadata=None) -> float:
    return float(random.randint(0, 1))


def zero_reward(response: str, label, metadata=None) -> float:
    """0 for every sample: a run trained by another signal alone (slime's --opd-type sglang example returns 0)."""
    return 0.0


class _Rules(Mapping[str, Callable[..., float]]):
    """rm_type -> its rule function: a view of the rule types in rlrun.config.kinds.REWARDS (registered by
    rlrun.reward.spec, and any registered at run time), each function resolved from its spec's path."""

    def __getitem__(self, name: str) -> Callable[..., float]:
        if name not in REWARDS or not REWARDS[name].score:  # a remote or judged type has no rule
            raise KeyError(name)
        return resolve(REWARDS[name].score)

    def __iter__(self) -> Iterator[str]:
        return iter([k for k, spec in REWARDS.items() if spec.score])

    def __len__(self) -> int:
        return sum(bool(spec.score) for spec in REWARDS.values())


RULES: Mapping[str, Callable[..., float]] = _Rules()


def top_score(rm_type: str) -> float | None:
    """The score of a right answer under `rm_type` (every rule above gives 1.0 to it: exact and character match,
    F1 of an equal answer, the math graders), or None for a remote or custom reward, whose range rlrun does not
    know. Groups that all agree at it are solved prompts (rlrun.guard.invariants.zero_variance)."""
    base = rm_type[len("boxed_"):] if rm_type.startswith("boxed_") else rm_type
    return 1.0 if base in RULES else None


def rule_score(rm_type: str, response: str, label, metadata=None) -> float:
    """Score with a rule type, honouring the `boxed_` prefix; unknown types raise with the list."""
    base = rm_type
    if rm_type.startswith("boxed_"):
        base = rm_type[len("boxed_"):]
        response = last_boxed(response) or ""
    if base not in RULES:
        raise ValueError(
            f"rm_type={rm_type!r} is unknown; use one of {', '.join(RULES)} (optionally with a boxed_ prefix), "
            "'remote', or a custom 'module.path:function'"
        )
    return float(RULES[base](response, label, metadata))
