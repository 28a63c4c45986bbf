"""Answer extraction shared by the rule-based rewards: thinking removal and the last \\boxed{}.

Everything here is linear in the response length and bounded: a boxed answer longer than
MAX_ANSWER_CHARS is treated as no answer (a real final answer is short; an unbounded brace scan
over a 10 MB hostile response would only burn the time limit).
"""

from __future__ import annotations

import re

MAX_ANSWER_CHARS = 4096
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACES = re.compile(r"[{}]")


def strip_thinking(text: str) -> str | None:
    """The text after the last `</think>`, or None when the response has no `</think>`."""
    head, sep, tail = text.rpartition("</think>")
    return tail if sep else None


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` / `\\fbox{...}` (balanced braces), or `\\boxed x` form."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    m = _BOXED.match(text, start)
    if m is None:  # "\boxed 5" (no braces): the token after the space
        rest = text[start + len("\\boxed"):]
        if rest.startswith(" "):
            word = rest[1:].split("$", 1)[0].split(None, 1)
            return word[0] if word else None
        return None
    depth, begin = 1, m.end()
    for b in _BRACES.finditer(text, begin, min(len(text), begin + MAX_ANSWER_CHARS)):
        depth += 1 if b.group() == "{" else -1
        if depth == 0:
            return text[begin:b.start()]
    return None
