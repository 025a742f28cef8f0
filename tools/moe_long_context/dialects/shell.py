"""A small bash word splitter that remembers where each word is in the text.

Launch scripts are bash. To check one, the engine needs its words as bash would pass them to the program
(quotes removed, ``\\``-newline continuations joined, comments dropped); to correct one, it needs to know
where each word was written, so that a fix replaces exactly the characters of the flags it changes and
leaves every other byte (the launcher line, ``export`` lines, comments, arrays, line breaks) as it was.

Only the part of bash's grammar launch scripts use is understood: quoting (``'..'``, ``".."``, ``\\``),
comments, command separators (newline, ``;``, ``&&``, ``||``, ``|``, ``&``), redirections (``>``, ``2>&1``,
``<``), array parentheses (``ARGS=( ... )``) and ``$(...)`` inside a word. Variables are not expanded here.
Where bash would refuse the text outright, it is read the way its author meant: an unquoted
``Et|(tt|)*30mL`` is one word (a ``|`` with no blank on either side, parentheses inside a word), and the
word says so (``breaks``), so that lint can report what bash would do with it.
"""

from __future__ import annotations

from dataclasses import dataclass

SEPARATORS = {"\n", ";", "&&", "||", "|", "&", ";;"}


@dataclass(frozen=True)
class Word:
    """One shell word: its value after quote removal, and the [start, end) span of its source text.

    ``kind`` is ``word`` for an ordinary word, ``sep`` for a command separator, ``redirect`` for a
    redirection operator or its target, ``open``/``close`` for array parentheses.
    """

    value: str
    start: int
    end: int
    kind: str = "word"
    quoted: bool = False  # some part of it was quoted (so it is never an operator or a comment)
    breaks: str = ""  # unquoted | ( ) kept in the word that bash reads as a pipe or a subshell


class ShellSyntaxError(ValueError):
    pass


def split_words(text: str) -> list[Word]:
    """The words of a bash fragment, in order, with their spans."""
    out: list[Word] = []
    i, n = 0, len(text)
    depth = 0  # array parentheses: newlines inside are plain whitespace
    expect_target = False
    while i < n:
        ch = text[i]
        if ch in " \t\r":
            i += 1
            continue
        if ch == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
            continue
        if ch == "\\" and text[i + 1 : i + 3] == "\r\n":
            i += 3
            continue
        if ch == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if ch == "\n":
            if depth == 0:
                out.append(Word("\n", i, i + 1, "sep"))
            i += 1
            continue
        if ch in ";&|":
            op = text[i : i + 2] if text[i : i + 2] in ("&&", "||", ";;", "&>") else ch
            if op == "&>":
                out.append(Word(op, i, i + 2, "redirect"))
                expect_target = True
                i += 2
                continue
            out.append(Word(op, i, i + len(op), "sep"))
            i += len(op)
            continue
        if ch in "<>":
            j = i + 1
            while j < n and text[j] in "<>&":
                j += 1
            while j < n and text[j].isdigit():
                j += 1
            out.append(Word(text[i:j], i, j, "redirect"))
            # 2>&1 and >&2 carry their target; > file takes the next word
            expect_target = text[j - 1] not in "0123456789-"
            i = j
            continue
        if ch == "(" and i > 0 and text[i - 1] == "=":  # ARGS=( ... ): an array
            depth += 1
            out.append(Word("(", i, i + 1, "open"))
            i += 1
            continue
        if ch == ")":
            if depth:
                depth -= 1
                out.append(Word(")", i, i + 1, "close"))
            else:
                out.append(Word(")", i, i + 1, "word"))
            i += 1
            continue
        word, end, quoted, breaks = _read_word(text, i)
        # a digit-only word right before a redirection is its file descriptor (2>&1)
        if not quoted and word.isdigit() and end < n and text[end] in "<>":
            j = end
            while j < n and text[j] in "<>&":
                j += 1
            while j < n and text[j].isdigit():
                j += 1
            out.append(Word(text[i:j], i, j, "redirect"))
            expect_target = text[j - 1] not in "0123456789-"
            i = j
            continue
        kind = "redirect" if expect_target else "word"
        expect_target = False
        out.append(Word(word, i, end, kind, quoted, breaks))
        i = end
    return out


def _read_word(text: str, i: int) -> tuple[str, int, bool, str]:
    """One word from position i: (value with quotes removed, end position, whether any part was quoted, the
    unquoted | ( ) kept in it that bash would not)."""
    n = len(text)
    buf: list[str] = []
    breaks = ""
    quoted = False
    subst = 0  # $( ... ) nesting inside the word
    parens = 0  # ( ... ) inside an unquoted word
    while i < n:
        ch = text[i]
        if ch == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise ShellSyntaxError(f"unterminated ' quote at character {i}")
            buf.append(text[i + 1 : end])
            quoted = True
            i = end + 1
            continue
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n and text[j + 1] in '"\\$`\n':
                    if text[j + 1] != "\n":
                        buf.append(text[j + 1])
                    j += 2
                    continue
                buf.append(text[j])
                j += 1
            if j >= n:
                raise ShellSyntaxError(f'unterminated " quote at character {i}')
            quoted = True
            i = j + 1
            continue
        if ch == "\\":
            if i + 1 < n:
                if text[i + 1] != "\n":
                    buf.append(text[i + 1])
                i += 2
                continue
            i += 1
            continue
        if ch == "$" and text[i + 1 : i + 2] == "(":
            subst += 1
            buf.append("$(")
            i += 2
            continue
        if subst and ch == ")":
            subst -= 1
            buf.append(ch)
            i += 1
            continue
        if subst == 0:
            # Lenient where bash would not parse at all: '|' and '(' ')' inside a word (an unquoted
            # pipeline layout such as Et|(tt|)*30mL) stay in the word; '|' between words is a pipe.
            if ch in " \t\r\n;&<>":
                break
            if ch == "|" and not (buf and i + 1 < n and text[i + 1] not in " \t\r\n|"):
                break
            if ch == "(":
                if i > 0 and text[i - 1] == "=":
                    break
                parens += 1
            elif ch == ")":
                if not parens:
                    break
                parens -= 1
            if ch in "|()" and ch not in breaks:
                breaks += ch
        buf.append(ch)
        i += 1
    return "".join(buf), i, quoted, breaks


def quote(word: str) -> str:
    """A word written so that bash passes it unchanged (bare when that is safe)."""
    if word and all(c.isalnum() or c in "-_.,:/=+@%^[]*" for c in word) and not word.startswith("#"):
        if "*" in word or "[" in word:
            return "'" + word + "'"
        return word
    if "'" in word and not any(c in word for c in '$`\\"!'):  # a Hydra-quoted override: in double quotes
        return '"' + word + '"'
    return "'" + word.replace("'", "'\"'\"'") + "'"


def shell_join(words: list[str]) -> str:
    """Words as one line of bash arguments, each quoted where bash would otherwise split or expand it."""
    return " ".join(quote(word) for word in words)
