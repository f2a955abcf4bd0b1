# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Match the names sparkctl reads from an engine against what an engine release can produce,
as recorded in the release's manifest (tools/engine_manifest.py): the Prometheus series its
/metrics page can expose, and the log lines its logging calls can print.

A manifest's `metrics` maps each metric's base name to its kind; `metric_series` turns that into
the series names Prometheus scrapes (a counter `vllm:generation_tokens` is exposed as
`vllm:generation_tokens_total` and `..._created`, a histogram as `_bucket`, `_sum`, `_count`,
`_created`).

A manifest's `log_formats` holds each logged message as a str.format string whose placeholders
are all `{}`. A regex sparkctl matches a log line with is checked by building one text the regex
matches (`example_of`) and asking whether a format can print it (`format_can_print`). The text
may start and end anywhere in the printed line. A placeholder prints one value: a run of
characters without whitespace, possibly empty (a number, a name, a quoted identifier, the key of
a `key=value` chosen at run time), and never both characters the regex writes out and ones it
leaves open (`[0-9.]+`): "available_gpu_mem=0" is a key and a value, two placeholders, not one.
And the text must match two letters or digits in a row that the regex writes out with the
format's own literal text: what placeholders and punctuation alone print (or a single letter
next to them) says nothing about the release.
So "GPU KV cache size: 0 tokens" can be printed by "GPU KV cache size: {} tokens" and
"available_gpu_mem=0 GB" by "..., {}={} GB", while "GPU KV cahce size: 0 tokens", words in
another order, or "available_gpu_mem=0 GB" against "avail mem={} GB" cannot. The check is a
judgement on one text: a regex whose fixed text only placeholders print (`available_gpu_mem=`
without the " GB" after it) is not found.

Only the Python standard library is used."""

from __future__ import annotations

import functools
import re
import string

try:  # Python 3.11 and later
    from re import _constants as _sre
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants as _sre
    import sre_parse as _sre_parse

# The series prometheus_client exposes for a metric of each kind, as suffixes of its base name.
SERIES_SUFFIXES = {
    "gauge": ("",),
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


def metric_series(metrics):
    """The set of series names Prometheus can scrape, from a manifest's {base name: kind}."""
    series = set()
    for name, kind in (metrics or {}).items():
        if kind not in SERIES_SUFFIXES:
            raise ValueError(f"metric {name}: unknown kind {kind!r}")
        series.update(name + suffix for suffix in SERIES_SUFFIXES[kind])
    return series


# ------------------------------------------------------------------------------------ a text a regex matches

_CATEGORIES = {
    _sre.CATEGORY_DIGIT: r"\d", _sre.CATEGORY_NOT_DIGIT: r"\D",
    _sre.CATEGORY_SPACE: r"\s", _sre.CATEGORY_NOT_SPACE: r"\S",
    _sre.CATEGORY_WORD: r"\w", _sre.CATEGORY_NOT_WORD: r"\W",
    _sre.CATEGORY_LINEBREAK: r"\n", _sre.CATEGORY_NOT_LINEBREAK: r"[^\n]",
}
# The characters tried, in order, where a class or a negation leaves the choice open.
_CANDIDATES = "a0 x_-.,:/=A" + string.ascii_letters + string.digits + string.punctuation
_REPEATS = tuple(getattr(_sre, op) for op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(_sre, op))
_ZERO_WIDTH = (_sre.AT, _sre.ASSERT, _sre.ASSERT_NOT)


def _in_class(char, items):
    for op, av in items:
        if op is _sre.LITERAL and char == chr(av):
            return True
        if op is _sre.RANGE and av[0] <= ord(char) <= av[1]:
            return True
        if op is _sre.CATEGORY and re.fullmatch(_CATEGORIES.get(av, r"(?!)"), char):
            return True
    return False


def _class_char(items):
    negated = bool(items) and items[0][0] is _sre.NEGATE
    if negated:
        items = items[1:]
    elif items:
        op, av = items[0]
        if op is _sre.LITERAL:
            return chr(av)
        if op is _sre.RANGE:
            return chr(av[0])
    for char in _CANDIDATES:
        if _in_class(char, items) != negated:
            return char
    raise ValueError("a character class this cannot produce a character of")


def _produce(items, groups, open_=False):
    """[(text, open)] pieces of a text the parsed items match: `open` when the regex leaves the
    characters open (a class, `.`, a repeat of varying length) rather than writing them out."""
    out = []
    for op, av in items:
        if op is _sre.LITERAL:
            out.append((chr(av), open_))
        elif op is _sre.NOT_LITERAL:
            out.append((next(c for c in _CANDIDATES if c != chr(av)), True))
        elif op is _sre.ANY:
            out.append(("a", True))
        elif op is _sre.IN:
            items_ = list(av)
            # [.] is a way of writing a dot.
            out.append((_class_char(items_), open_ or len(items_) != 1 or items_[0][0] is not _sre.LITERAL))
        elif op in _REPEATS:
            low, high, item = av
            for _repeat in range(low):
                out += _produce(item, groups, open_ or low != high)
        elif op is _sre.SUBPATTERN:
            group, _add, _del, item = av
            pieces = _produce(item, groups, open_)
            if group is not None:
                groups[group] = pieces
            out += pieces
        elif op is getattr(_sre, "ATOMIC_GROUP", None):
            out += _produce(av, groups, open_)
        elif op is _sre.BRANCH:
            out += _produce(av[1][0], groups, open_)
        elif op is _sre.GROUPREF and av in groups:
            out += groups[av]
        elif op in _ZERO_WIDTH:
            continue
        else:
            raise ValueError(f"cannot produce a text for {op}")
    return out


def example_with_open_positions(pattern):
    """(text, positions): `example_of`'s text, and the positions of its characters the regex
    leaves open (`[0-9,]+` gives an open "0"; the literal "tokens" gives six fixed ones)."""
    try:
        parsed = _sre_parse.parse(pattern)
    except re.error as err:
        raise ValueError(f"{pattern!r}: {err}") from err
    pieces = _produce(list(parsed), {})
    example = "".join(text for text, _open in pieces)
    if not re.search(pattern, example):
        raise ValueError(f"{pattern!r}: the text built for it, {example!r}, does not match it")
    positions, at = set(), 0
    for text, open_ in pieces:
        if open_:
            positions.update(range(at, at + len(text)))
        at += len(text)
    return example, frozenset(positions)


def example_of(pattern):
    """One short text the regex matches (`re.search`): every repeat taken its least number of
    times, the first alternative, the first character of a class. ValueError when it cannot
    build one (a conditional group, a lookaround the text does not satisfy, a bad pattern)."""
    return example_with_open_positions(pattern)[0]


# ------------------------------------------------------------------------------------ can a format print a text


@functools.lru_cache(maxsize=65536)
def _automaton(fmt):
    """The format as states 0..n, one per token: ({char: mask of the literal tokens that are
    that char}, mask of the placeholder tokens, n)."""
    literals, holes, position = {}, 0, 0
    for text, field, _spec, _conversion in string.Formatter().parse(fmt):
        for char in text:
            literals[char] = literals.get(char, 0) | (1 << position)
            position += 1
        if field is not None:
            holes |= 1 << position
            position += 1
    return literals, holes, position


def _skip_holes(states, holes):
    while True:
        more = states | ((states & holes) << 1)
        if more == states:
            return states
        states = more


def format_can_print(fmt, text, open_positions=()):
    """True when `text` can be part of a line the `{}`-placeholder format prints: the module's
    docstring says what a placeholder prints; `open_positions` are the text's characters a regex
    leaves open (example_with_open_positions), which a placeholder never prints together with
    fixed ones. An automaton over the format's tokens, run from every state at once: a literal
    token takes its own character, a placeholder any character but whitespace, or nothing.
    Each state set is a bit mask of token positions, kept apart by what the path has shown:
    `levels[0]` nothing yet, `levels[1]` the first letter or digit of a run the format writes
    out too, `levels[2]` two in a row (the text is this format's); and within a level, by where
    it stands: at a token not begun, or in a placeholder that printed fixed, or open, characters."""
    literals, holes, size = _automaton(fmt)
    open_positions = frozenset(open_positions)
    levels = [(_skip_holes((1 << (size + 1)) - 1, holes), 0, 0), (0, 0, 0), (0, 0, 0)]
    for index, char in enumerate(text):
        mask = literals.get(char, 0)
        is_open = index in open_positions
        word = char.isalnum() and not is_open
        after = [[0, 0, 0], [0, 0, 0], [0, 0, 0]]
        for level, (fresh, fixed, open_) in enumerate(levels):
            if not fresh | fixed | open_:
                continue
            # A literal token of the format takes the character; a letter or digit the regex writes
            # out extends the run, anything else breaks one not yet long enough.
            after[min(level + 1, 2) if word else (2 if level == 2 else 0)][0] |= ((fresh | fixed | open_) & mask) << 1
            # A placeholder prints the character (breaking a run), if it is no whitespace and of
            # the kind, fixed or open, the placeholder printed so far.
            kept = after[2 if level == 2 else 0]
            if char.isspace():
                continue
            if is_open:
                kept[2] |= (fresh | open_) & holes
            else:
                kept[1] |= (fresh | fixed) & holes
        # A placeholder may end after any character it printed: on to the next token.
        levels = [(_skip_holes(fresh | ((fixed | open_) << 1), holes), fixed, open_) for fresh, fixed, open_ in after]
        if not any(fresh | fixed | open_ for fresh, fixed, open_ in levels):
            return False
    return any(levels[2])


def log_line_possible(pattern, formats):
    """The formats, of a manifest's `log_formats`, that can print a line the regex matches
    (judged on the one text `example_with_open_positions` builds for it), in their order."""
    example, open_positions = example_with_open_positions(pattern)
    return [fmt for fmt in formats if format_can_print(fmt, example, open_positions)]
