"""A lexer for the subset of bash that slime's run scripts use, so that they can be read without running them.

Why not `shlex` alone: `shlex.shlex(posix=True)` removes quotes, and with them the one fact the expander
needs, namely whether a `$` was inside single quotes (literal), double quotes (expanded, not split) or
bare (expanded and split). This lexer keeps that as segments of a word; `shlex` is still what we use to
quote words on the way out (see slime_export.py).

Covered: words, single/double quotes with bash's escapes, backslash-newline continuations, comments,
`$NAME`, `${...}`, `$(...)`, `$((...))`, backticks, and the operators that end a simple command.
Not covered (a slime run script has no use for them): here-documents, `$'...'` strings, brace expansion.
"""

from __future__ import annotations

from dataclasses import dataclass

# Characters that end a bare word; `(`/`)` so that `NAME=(` opens an array.
_OPERATOR_CHARS = set(";&|()<>")
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_SPECIAL_PARAMS = set("@*#?$!-0123456789")


@dataclass(frozen=True)
class Lit:
    """Literal text: no expansion happens to it."""

    text: str


@dataclass(frozen=True)
class Param:
    """`$NAME` or `${expr}`; `quoted` is True inside double quotes (then no word splitting)."""

    expr: str
    quoted: bool


@dataclass(frozen=True)
class CmdSub:
    """`$(...)`, `$((...))` or backticks: the expander cannot know their output (it runs nothing)."""

    source: str
    quoted: bool


Segment = Lit | Param | CmdSub


@dataclass(frozen=True)
class Word:
    segments: tuple[Segment, ...]
    line: int

    def literal(self) -> str | None:
        """The word's text when it has no expansion in it, else None."""
        if all(isinstance(s, Lit) for s in self.segments):
            return "".join(s.text for s in self.segments)  # type: ignore[union-attr]
        return None

    def has_quotes(self) -> bool:
        return any(getattr(s, "quoted", False) for s in self.segments) or any(
            isinstance(s, Lit) and s.text == "" for s in self.segments
        )


@dataclass(frozen=True)
class Op:
    """An operator token: newline, `;`, `&&`, `||`, `|`, `&`, `(`, `)`, or a redirection."""

    text: str
    line: int


Token = Word | Op


class BashSyntaxError(ValueError):
    pass


class _Lexer:
    def __init__(self, text: str, filename: str):
        self.s = text
        self.i = 0
        self.line = 1
        self.filename = filename

    def error(self, message: str, line: int | None = None) -> BashSyntaxError:
        return BashSyntaxError(f"{self.filename}:{line or self.line}: {message}")

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def advance(self, n: int = 1) -> str:
        chunk = self.s[self.i : self.i + n]
        self.line += chunk.count("\n")
        self.i += n
        return chunk

    def tokens(self) -> list[Token]:
        out: list[Token] = []
        while self.i < len(self.s):
            c = self.peek()
            if c in " \t\r":
                self.advance()
            elif c == "\\" and self.peek(1) == "\n":
                self.advance(2)
            elif c == "\n":
                out.append(Op("\n", self.line))
                self.advance()
            elif c == "#":
                while self.i < len(self.s) and self.peek() != "\n":
                    self.advance()
            elif c in _OPERATOR_CHARS:
                out.append(self.operator())
            else:
                out.append(self.word())
        return out

    def operator(self) -> Op:
        line = self.line
        for op in ("&&", "||", ">>", ">&", "&>", ";;"):
            if self.s.startswith(op, self.i):
                self.advance(2)
                return Op(op, line)
        return Op(self.advance(), line)

    def word(self) -> Word:
        line = self.line
        segments: list[Segment] = []
        buf: list[str] = []

        def flush() -> None:
            if buf:
                segments.append(Lit("".join(buf)))
                buf.clear()

        while self.i < len(self.s):
            c = self.peek()
            if c in " \t\r\n" or c in _OPERATOR_CHARS:
                break
            if c == "\\":
                self.advance()
                nxt = self.advance()
                if nxt != "\n":  # backslash-newline inside a word is a continuation
                    buf.append(nxt)
            elif c == "'":
                flush()
                self.advance()
                end = self.s.find("'", self.i)
                if end < 0:
                    raise self.error("unterminated single quote", self.line)
                segments.append(Lit(self.advance(end - self.i)))
                self.advance()
            elif c == '"':
                flush()
                self.advance()
                segments.extend(self.double_quoted())
            elif c == "$" or c == "`":
                flush()
                segments.append(self.expansion(quoted=False))
            else:
                buf.append(self.advance())
        flush()
        return Word(tuple(segments), line)

    def double_quoted(self) -> list[Segment]:
        segments: list[Segment] = []
        buf: list[str] = []
        start = self.line
        while True:
            if self.i >= len(self.s):
                raise self.error("unterminated double quote (opened here)", start)
            c = self.peek()
            if c == '"':
                self.advance()
                break
            if c == "\\" and self.peek(1) in '$`"\\\n':
                self.advance()
                nxt = self.advance()
                if nxt != "\n":
                    buf.append(nxt)
            elif c == "$" or c == "`":
                if buf:
                    segments.append(Lit("".join(buf)))
                    buf.clear()
                segments.append(self.expansion(quoted=True))
            else:
                buf.append(self.advance())
        # An empty "" is still a word (an empty argument), so it keeps an empty literal; `"${A[@]}"` must
        # not get one, or an empty array would splice one empty word instead of none.
        if buf or not segments:
            segments.append(Lit("".join(buf)))
        return segments

    def expansion(self, quoted: bool) -> Segment:
        start_line = self.line
        if self.peek() == "`":
            self.advance()
            end = self.s.find("`", self.i)
            if end < 0:
                raise self.error("unterminated backtick")
            body = self.advance(end - self.i)
            self.advance()
            return CmdSub(f"`{body}`", quoted)
        self.advance()  # the `$`
        c = self.peek()
        if c == "(":
            return CmdSub("$" + self.balanced("(", ")", start_line), quoted)
        if c == "{":
            return Param(self.balanced("{", "}", start_line)[1:-1], quoted)
        if c in _NAME_CHARS and not c.isdigit():
            j = self.i
            while j < len(self.s) and self.s[j] in _NAME_CHARS:
                j += 1
            return Param(self.advance(j - self.i), quoted)
        if c in _SPECIAL_PARAMS and c:
            return Param(self.advance(), quoted)
        return Lit("$")

    def balanced(self, open_: str, close: str, start_line: int) -> str:
        """Text from an opening bracket to its partner, skipping quoted brackets."""
        depth = 0
        j = self.i
        quote = ""
        while j < len(self.s):
            ch = self.s[j]
            if quote:
                if ch == "\\" and quote == '"':
                    j += 1
                elif ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif ch == "\\":
                j += 1
            elif ch == open_:
                depth += 1
            elif ch == close:
                depth -= 1
                if depth == 0:
                    return self.advance(j + 1 - self.i)
            j += 1
        self.line = start_line
        raise self.error(f"unterminated {open_!r}: no matching {close!r}")


def tokenize(text: str, filename: str = "<script>") -> list[Token]:
    """Split bash source into words and operators (comments and continuations removed)."""
    return _Lexer(text, filename).tokens()
