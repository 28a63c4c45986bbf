"""Read a slime run script without executing it: variables, arrays, `source`d model scripts, exports and
the `ray job submit ... -- python3 train.py ARGS` line, with every argument traced to file:line.

What is evaluated: `NAME=value`, `NAME=(...)` (multi-line, comments inside), `NAME+=(...)`, `export`,
`source FILE` / `. FILE`, and the expansions `$NAME`, `${NAME}`, `${NAME[@]}`, `${NAME:-default}` (also
`-`, `:=`, `=`), word splitting of bare expansions. What is not: loops, conditionals, functions and
command substitutions. Variables they set are *unknown*; using one keeps its text (`${HAS_NVLINK}`) and
records a note, so the caller can report it instead of silently passing an empty string on.
`SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" ... && pwd)"` is the one command substitution
recognised: it is the directory of the script, which is what slime uses to find `models/*.sh`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from rlrun.interop.bash_lexer import CmdSub, Lit, Op, Param, Token, Word, tokenize

_COMPOUND_OPEN = {"for": "done", "while": "done", "until": "done", "select": "done", "if": "fi", "case": "esac"}
_STATEMENT_END = {"\n", ";", "&&", "||", "|", "&", ";;"}
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_PARAM_DEFAULT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(:?)([-=])(.*)$", re.S)
_PARAM_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[(@|\*|0)\])?$")


@dataclass(frozen=True)
class Arg:
    """One expanded word and where it came from (the array it was spliced from, if any)."""

    text: str
    file: str
    line: int
    array: str | None = None

    @property
    def where(self) -> str:
        loc = f"{Path(self.file).name}:{self.line}"
        return f"{loc} ({self.array})" if self.array else loc


class Unknown:
    """A variable set by code the reader does not run (loop, `if`, command substitution)."""

    def __init__(self, reason: str):
        self.reason = reason


@dataclass
class Launch:
    """The training command: `ray job submit [opts] -- python3 ENTRY ARGS` (or a bare `python3 ENTRY`)."""

    entry: str  # train.py | train_async.py | ...
    args: list[Arg]
    address: str | None
    runtime_env_vars: dict[str, str]
    file: str
    line: int


@dataclass
class Script:
    path: Path
    variables: dict[str, object] = field(default_factory=dict)  # str | list[Arg] | Unknown
    exported: list[str] = field(default_factory=list)
    sourced: list[Path] = field(default_factory=list)
    launch: Launch | None = None
    notes: list[str] = field(default_factory=list)
    # the other commands the script ran (recorded, not run): (name, its arguments, file:line); the static reader
    # records `ray` commands only
    commands: list[tuple[str, list[str], str]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """Exported variables with known values, then the job's runtime-env vars (which win, as in Ray)."""
        env = {n: v for n in self.exported if isinstance(v := self.variables.get(n), str)}
        if self.launch:
            env.update(self.launch.runtime_env_vars)
        return env


class ScriptError(ValueError):
    pass


def read_script(path: str | Path, environ: dict[str, str] | None = None) -> Script:
    """Parse `path` (and what it sources) into a Script. `environ` plays the caller's environment; by
    default it is empty so that the result does not depend on who runs the import."""
    path = Path(path)
    if not path.is_file():
        raise ScriptError(f"{path}: no such file; pass the slime run script (e.g. scripts/run-qwen3-4B.sh)")
    script = Script(path=path)
    _Reader(script, dict(environ or {})).run_file(path)
    return script


class _Reader:
    def __init__(self, script: Script, environ: dict[str, str]):
        self.script = script
        self.environ = environ
        self.file = str(script.path)

    # ---- statements -------------------------------------------------------------------------------
    def run_file(self, path: Path) -> None:
        previous = self.file
        self.file = str(path)
        tokens = tokenize(path.read_text(), str(path))
        i = 0
        while i < len(tokens):
            i = self.statement(tokens, i, path)
        self.file = previous

    def statement(self, toks: list[Token], i: int, path: Path) -> int:
        """Evaluate the simple command starting at toks[i]; return the index after it."""
        if isinstance(toks[i], Op):
            return i + 1
        first = toks[i].literal()  # type: ignore[union-attr]
        if first in _COMPOUND_OPEN or (first == "{"):
            return self.skip_compound(toks, i)
        function_def = not _assign_target(toks[i])  # type: ignore[arg-type]  # `A=()` is an empty array
        if function_def and i + 2 < len(toks) and _is_op(toks[i + 1], "(") and _is_op(toks[i + 2], ")"):
            return self.skip_compound(toks, i + 3)  # `name() { ... }`: a function body is not run
        words: list[Word] = []
        while i < len(toks) and not (isinstance(toks[i], Op) and toks[i].text in _STATEMENT_END):
            tok = toks[i]
            if isinstance(tok, Op) and tok.text == "(" and words and _assign_target(words[-1]):
                i = self.array_assignment(toks, i + 1, words.pop())
                continue
            if isinstance(tok, Op):  # a redirection or subshell: its target is no argument of ours
                i += 1 if tok.text in ("(", ")") else 2
                continue
            words.append(tok)
            i += 1
        if words:
            self.simple_command(words, path)
        return i + 1

    def skip_compound(self, toks: list[Token], i: int) -> int:
        """Skip a loop/if/case/function body (it is not run), marking what it assigns as unknown."""
        start_line = toks[i].line
        depth = 0
        at_command = True
        while i < len(toks):
            tok = toks[i]
            if isinstance(tok, Op):
                at_command = tok.text in _STATEMENT_END
            else:
                text = tok.literal()
                if at_command and (text in _COMPOUND_OPEN or text == "{"):
                    depth += 1
                elif at_command and text in ("done", "fi", "esac", "}"):
                    depth -= 1
                    if depth == 0:
                        return i + 1
                elif at_command:
                    self.mark_unknown_assignments(toks, i, start_line)
                at_command = text in ("then", "do", "else", "elif", "{")
            i += 1
        raise ScriptError(f"{self.file}:{start_line}: a loop/if/function block is never closed")

    def mark_unknown_assignments(self, toks: list[Token], i: int, line: int) -> None:
        word = toks[i]
        if isinstance(word, Word) and (name := _assign_target(word)):
            self.script.variables[name] = Unknown(f"assigned inside a loop/if/function at line {line}")

    def array_assignment(self, toks: list[Token], i: int, target: Word) -> int:
        name = _assign_target(target) or ""  # the caller checked that target is `NAME=` / `NAME+=`
        append = "+=" in (target.literal() or "")
        elements: list[Arg] = []
        while i < len(toks) and not _is_op(toks[i], ")"):
            tok = toks[i]
            if isinstance(tok, Word):
                elements.extend(
                    a if a.array else Arg(a.text, a.file, a.line, name) for a in self.expand(tok)
                )
            i += 1
        if i >= len(toks):
            raise ScriptError(f"{self.file}:{target.line}: array {name}=( is never closed with ')'")
        old = self.script.variables.get(name)
        if not append:
            self.script.variables[name] = elements
        elif isinstance(old, list):
            self.script.variables[name] = old + elements
        elif not isinstance(old, Unknown):  # `+=` onto an unset name starts the array
            self.script.variables[name] = elements
        return i + 1

    def simple_command(self, words: list[Word], path: Path) -> None:
        # Leading NAME=value words; with no command after them they set shell variables.
        k = 0
        while k < len(words) and _assign_target(words[k]):
            k += 1
        if k == len(words):
            for w in words:
                self.assign(w, exported=False)
            return
        head = words[k].literal()
        rest = words[k + 1 :]
        if head == "printf" and len(rest) >= 2 and rest[0].literal() == "-v" and (name := rest[1].literal()):
            self.script.variables[name] = Unknown(f"set by `printf -v` at {Path(self.file).name}:{words[k].line}")
        if head == "export":
            for w in rest:
                if _assign_target(w):
                    self.assign(w, exported=True)
                elif (name := w.literal()) and not name.startswith("-"):
                    self.script.exported.append(name)
        elif head in ("source", "."):
            self.source(rest, words[k].line, path)
        elif head == "ray":
            self.ray_command(rest, words[k].line)
        elif head and re.fullmatch(r"python3?(\.\d+)?", head):
            self.python_command(rest, words[k].line)

    def assign(self, word: Word, exported: bool) -> None:
        split = _split_assignment(word)
        if split is None:  # callers pass assignment words only
            return
        name, value_word = split
        if any(isinstance(s, CmdSub) for s in value_word.segments):
            src = " ".join(s.source for s in value_word.segments if isinstance(s, CmdSub))
            if "dirname" in src and ("BASH_SOURCE" in src or "$0" in src):
                value: object = str(Path(self.file).resolve().parent)
            else:
                value = Unknown(f"command substitution at {Path(self.file).name}:{word.line}")
        else:
            value = self.expand_scalar(value_word)
        self.script.variables[name] = value
        if exported and name not in self.script.exported:
            self.script.exported.append(name)

    def source(self, rest: list[Word], line: int, path: Path) -> None:
        if not rest:
            return
        target = self.expand_scalar(rest[0])
        candidate = Path(target)
        if not candidate.is_absolute():
            candidate = path.parent / candidate
        if "${" in target or "$(" in target or not candidate.is_file():
            self.note(line, f"`source {target}`: file not found next to the script; its variables are unknown")
            return
        self.script.sourced.append(candidate)
        self.run_file(candidate)

    def ray_command(self, rest: list[Word], line: int) -> None:
        texts = [w.literal() for w in rest[:2]]
        if texts != ["job", "submit"]:
            words = [a.text for w in rest for a in self.expand(w)]
            self.script.commands.append(("ray", words, f"{Path(self.file).name}:{line}"))
            return
        args = [a for w in rest[2:] for a in self.expand(w)]
        opts = {}
        j = 0
        while j < len(args) and args[j].text != "--":
            key, eq, val = args[j].text.partition("=")
            if not eq and j + 1 < len(args) and not args[j + 1].text.startswith("--"):
                val = args[j + 1].text
                j += 1
            opts[key] = val
            j += 1
        env = _runtime_env_vars(opts.get("--runtime-env-json"), self.file, line)
        cmd = args[j + 1 :]
        if not cmd or not re.fullmatch(r"python3?(\.\d+)?", cmd[0].text):
            raise ScriptError(f"{self.file}:{line}: `ray job submit` does not run `-- python3 train.py ...`")
        self.script.launch = Launch(cmd[1].text, cmd[2:], opts.get("--address"), env, self.file, line)

    def python_command(self, rest: list[Word], line: int) -> None:
        """A bare `python3 train.py ARGS` (no `ray job submit`): no address, no runtime-env vars."""
        args = [a for w in rest for a in self.expand(w)]
        if args and re.search(r"train(_async)?\.py$", args[0].text):
            self.script.launch = Launch(args[0].text, args[1:], None, {}, self.file, line)

    def note(self, line: int, message: str) -> None:
        text = f"{Path(self.file).name}:{line}: {message}"
        if text not in self.script.notes:
            self.script.notes.append(text)

    # ---- expansion --------------------------------------------------------------------------------
    def expand_scalar(self, word: Word) -> str:
        return " ".join(a.text for a in self.expand(word, split=False))

    def expand(self, word: Word, split: bool = True) -> list[Arg]:
        """Expand one word into zero or more arguments (arrays splice, bare expansions split)."""
        if len(word.segments) == 1 and isinstance(word.segments[0], Param):
            value = self.lookup(word.segments[0].expr, word.line)
            if isinstance(value, list):  # `${ARR[@]}`: the elements, each with its own file:line
                return list(value)
        fields: list[Arg] = []
        current: list[str] = []
        started = word.has_quotes()

        def push_field() -> None:
            nonlocal current, started
            if current or started:
                fields.append(Arg("".join(current), self.file, word.line))
            current, started = [], False

        for seg in word.segments:
            if isinstance(seg, Lit):
                current.append(seg.text)
            elif isinstance(seg, CmdSub):
                self.note(word.line, f"{seg.source} is not run; its text is kept")
                current.append(seg.source)
            else:
                value = self.lookup(seg.expr, word.line)
                texts = [a.text for a in value] if isinstance(value, list) else None
                if texts is None and split and not seg.quoted and re.search(r"\s", value):
                    texts = value.split()
                if texts is None:
                    current.append(value)  # type: ignore[arg-type]
                    continue
                for n, text in enumerate(texts):  # first joins the word so far, the rest start new ones
                    if n:
                        push_field()
                    current.append(text)
                    started = True
        push_field()
        return fields

    def lookup(self, expr: str, line: int) -> str | list[Arg]:
        if m := _PARAM_NAME.match(expr):
            name, index = m.group(1), m.group(2)
            value = self.value_of(name)
            if value is None or isinstance(value, Unknown):
                reason = value.reason if isinstance(value, Unknown) else "not set in the script"
                self.note(line, f"${{{expr}}} is unknown ({reason}); its text is kept")
                return "${" + expr + "}"
            if isinstance(value, list):
                return value if index in ("@", "*") else (value[0].text if value else "")
            return [Arg(value, self.file, line)] if index in ("@", "*") else value
        if m := _PARAM_DEFAULT.match(expr):
            name, colon, _, default = m.groups()
            value = self.value_of(name)
            if isinstance(value, Unknown):
                self.note(line, f"${{{name}}} is unknown ({value.reason}); using its default {default!r}")
                value = None
            if value is None or (colon and value in ("", [])):
                # The default is itself bash text (`${A:-"1"}`, `${A:-${B}}`): lex and expand it in place.
                words = [Word(t.segments, line) for t in tokenize(default, self.file) if isinstance(t, Word)]
                return " ".join(self.expand_scalar(w) for w in words)
            return value  # type: ignore[return-value]
        self.note(line, f"${{{expr}}} is beyond what the reader evaluates; its text is kept")
        return "${" + expr + "}"

    def value_of(self, name: str) -> object:
        if name in self.script.variables:
            return self.script.variables[name]
        return self.environ.get(name)


def _is_op(tok: Token, text: str) -> bool:
    return isinstance(tok, Op) and tok.text == text


def _assign_target(word: Word) -> str | None:
    first = word.segments[0] if word.segments else None
    if isinstance(first, Lit) and (m := _ASSIGN.match(first.text)):
        return m.group(1)
    return None


def _split_assignment(word: Word) -> tuple[str, Word] | None:
    """`NAME=value...` -> (NAME, the value as a word of its own)."""
    first = word.segments[0] if word.segments else None
    if not (isinstance(first, Lit) and (m := _ASSIGN.match(first.text))):
        return None
    return m.group(1), Word((Lit(first.text[m.end():]), *word.segments[1:]), word.line)


def _runtime_env_vars(raw: str | None, file: str, line: int) -> dict[str, str]:
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ScriptError(f"{file}:{line}: --runtime-env-json is not valid JSON ({exc})") from exc
    return {k: str(v) for k, v in (data.get("env_vars") or {}).items()}
