"""Turn a decoded response into the predicted diff ``{modified, removed, score}``.

Two extractors live here:

* ``paper_parse`` reproduces docs/reference.md#text-game-reward steps 1-3 verbatim: first answer
  phrase (in the reference's priority order) wins and the text after its *last* occurrence is the
  answer; else the last fenced ``json`` block of at least 10 characters; else the whole response.
  Then the blind ``True``/``False``/``None`` replacement, ``json_repair.repair_json`` and
  ``dirtyjson.loads``.
* ``strict_parse`` finds the answer without corrupting it: end-of-sequence texts are removed, the
  answer region is the text after the last answer phrase (any casing), else after ``</think>``,
  else the whole response; inside it each balanced ``{...}`` block is decoded with ``json.loads``,
  then ``ast.literal_eval`` (Python ``repr``: single quotes, ``True``/``False``/``None``, tuples,
  trailing commas), then ``json_repair`` as a last resort, and the first block (after a phrase) or
  the last block (no phrase) that is an object with ``modified`` and ``removed`` is the answer. A
  truncated answer (no closing brace) is handed to ``json_repair``, which closes it. So prose
  braces before the answer (``{the box opens}``), an answer wrapped in a list, or a second JSON
  value after it do not hide the answer as they do in the reference (tg_126, tg_010, tg_020).

Neither raises on any input: failures come back as ``ParseFailure`` with a reason.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

import dirtyjson
import json_repair

from rlvr_world.rewards.eos import strip_eos
from rlvr_world.rewards.text_game.common import MAX_REPAIR_CHARS

#: Answer phrases in the reference's order of precedence (reference step 1).
PAPER_PHRASES = (
    "The final answer is:",
    "the final answer is:",
    "The final state is:",
    "the final state is:",
    "The final game state is:",
    "the final game state is:",
)
_PAPER_FENCE = re.compile(r"```json\s*([\s\S]*?)\s*```")
#: The reference ignores a last fenced json block shorter than this (reference step 1).
PAPER_MIN_FENCE_CHARS = 10
_STRICT_PHRASE = re.compile(r"the final (?:answer|state|game state) is:", re.IGNORECASE)
_THINK_END = "</think>"

#: Deepest nesting strict accepts in a decoded answer (a game state needs about 5 levels).
MAX_DEPTH = 64
#: How many ``{`` starts strict tries, and how many bracket/quote tokens it may scan in total.
MAX_BLOCK_STARTS = 64
MAX_SCAN_TOKENS = 1_000_000


@dataclass(frozen=True)
class ParseFailure:
    """Why no prediction could be decoded (becomes status ``unparseable``)."""

    reason: str


# --------------------------------------------------------------------------------------------
# paper


def paper_answer_text(response: str) -> tuple[str, str]:
    """The reference's answer extraction: ``(answer, branch)``; branch names the rule that hit."""
    for phrase in PAPER_PHRASES:
        if phrase in response:
            return response.rsplit(phrase, maxsplit=1)[-1].strip(), f"phrase:{phrase}"
    matches = _PAPER_FENCE.findall(response)
    if not matches or len(matches[-1]) < PAPER_MIN_FENCE_CHARS:
        return response, "whole_string"
    return str(matches[-1]), "last_json_fence"


def paper_parse(response: str) -> Any:
    """Steps 1-3 of the reference: the decoded value (any JSON type, duck-typed by the caller as
    the reference does), or ``ParseFailure``."""
    answer, _ = paper_answer_text(response)
    answer = answer.replace("True", "true").replace("False", "false").replace("None", "null")
    if len(answer) > MAX_REPAIR_CHARS:
        return ParseFailure(
            f"answer is {len(answer)} characters; not repaired (max {MAX_REPAIR_CHARS})"
        )
    limit = sys.getrecursionlimit()
    if max_nesting(answer, limit) > limit:
        # json_repair needs at least one Python frame per level, so it fails here (as it does in
        # the reference) but only after seconds of work; fail fast with the same outcome.
        return ParseFailure(
            f"answer nested deeper than {limit} levels; json_repair cannot parse it"
        )
    try:
        repaired = json_repair.repair_json(answer)
        return dirtyjson.loads(repaired)
    except Exception as exc:  # third-party parsers: the reference turns any failure into 0
        return ParseFailure(f"repair_json/dirtyjson failed: {type(exc).__name__}: {exc}"[:300])


# --------------------------------------------------------------------------------------------
# strict


def strict_parse(response: str) -> dict[str, Any] | ParseFailure:
    """The answer object with ``modified`` and ``removed``, decoded without corrupting strings."""
    text = strip_eos(response)
    region, after_phrase = _answer_region(text)
    found: dict[str, Any] | None = None
    first_unclosed: int | None = None
    for start, end in _brace_blocks(region):
        if end is None:
            first_unclosed = start if first_unclosed is None else first_unclosed
            continue
        value = _decode_block(region[start:end])
        if _is_answer(value):
            found = value
            if after_phrase:
                break
    if found is None and first_unclosed is not None:
        value = _repair(region[first_unclosed:])
        found = value if _is_answer(value) else None
    if found is None:
        return ParseFailure("no object with 'modified' and 'removed' keys found in the answer")
    return found


def _answer_region(text: str) -> tuple[str, bool]:
    last = None
    for match in _STRICT_PHRASE.finditer(text):
        last = match
    if last is not None:
        return text[last.end() :], True
    cut = text.rfind(_THINK_END)
    return (text[cut + len(_THINK_END) :] if cut >= 0 else text), False


_SPECIAL = re.compile(r"[\[\]{}\"']")
_DQ_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SQ_BODY = re.compile(r"[^'\\]*(?:\\.[^'\\]*)*'", re.S)


def _brace_blocks(text: str) -> Iterator[tuple[int, int | None]]:
    """``(start, end)`` of successive top-level ``{...}`` blocks; ``end`` is None when unclosed.

    A closed block is skipped as a whole; after an unclosed one the scan resumes at the next
    ``{``. Bounded by ``MAX_BLOCK_STARTS`` starts and ``MAX_SCAN_TOKENS`` tokens in total.
    """
    budget = [MAX_SCAN_TOKENS]
    pos = text.find("{")
    starts = 0
    while pos >= 0 and starts < MAX_BLOCK_STARTS and budget[0] > 0:
        starts += 1
        end = _match_brace(text, pos, budget)
        yield pos, end
        pos = text.find("{", end if end is not None else pos + 1)


def _brackets(text: str, pos: int, budget: list[int] | None = None) -> Iterator[tuple[str, int]]:
    """Each bracket of ``text`` from ``pos`` on outside quoted strings, with the index past it.

    Ends at the end of the text, at an unclosed quote, or once ``budget`` (tokens scanned,
    brackets and quotes, shared between calls; None: no bound) is spent.
    """
    while budget is None or budget[0] > 0:
        if budget is not None:
            budget[0] -= 1
        token = _SPECIAL.search(text, pos)
        if token is None:
            return
        char, pos = token.group(), token.end()
        if char in "[]{}":
            yield char, pos
        else:
            body = (_DQ_BODY if char == '"' else _SQ_BODY).match(text, pos)
            if body is None:
                return
            pos = body.end()


def _match_brace(text: str, start: int, budget: list[int]) -> int | None:
    """Index just past the bracket closing ``text[start]``, skipping quoted strings, or None."""
    depth = 0
    for char, pos in _brackets(text, start, budget):
        depth += 1 if char in "[{" else -1
        if depth == 0:
            return pos
    return None


def max_nesting(text: str, stop_above: int) -> int:
    """Deepest ``[``/``{`` nesting outside quoted strings (stops once above ``stop_above``)."""
    depth = deepest = 0
    for char, _ in _brackets(text, 0):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > stop_above:
                break
        else:
            depth = max(depth - 1, 0)
    return deepest


def _decode_block(block: str) -> object:
    try:
        return _plain(json.loads(block), 0)
    except (ValueError, RecursionError, _TooDeep):
        pass
    try:
        return _plain(ast.literal_eval(block), 0)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, _TooDeep):
        pass
    return _repair(block)


def _repair(text: str) -> object:
    if len(text) > MAX_REPAIR_CHARS or max_nesting(text, MAX_DEPTH) > MAX_DEPTH:
        return None
    try:
        return _plain(json_repair.repair_json(text, return_objects=True), 0)
    except Exception:  # third-party parser of arbitrary text; any failure means "no answer here"
        return None


class _TooDeep(ValueError):
    """Raised for decoded values nested deeper than ``MAX_DEPTH`` or holding non-JSON types."""


def _plain(value: Any, depth: int) -> object:
    """JSON-shaped copy of a decoded value: tuples become lists; sets, bytes, complex rejected."""
    if depth > MAX_DEPTH:
        raise _TooDeep("nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {_plain_key(k): _plain(v, depth + 1) for k, v in value.items()}
    raise _TooDeep(f"not a JSON value: {type(value).__name__}")


def _plain_key(key: Any) -> object:
    if key is None or isinstance(key, (bool, int, float, str)):
        return key
    raise _TooDeep(f"not a JSON key: {type(key).__name__}")


def _is_answer(value: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(value, dict) and "modified" in value and "removed" in value
