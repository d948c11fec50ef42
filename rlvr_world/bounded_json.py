"""JSON from a caller, with limits: size, nesting depth and text that can be written back out.

``loads_bounded(text, name)`` is ``json.loads`` for anything that arrives in a request
(``extra_info_json``, an HTTP label, the ``request`` member of an ``.npz``, an HTTP body):

- more than ``max_bytes`` characters: refused before parsing;
- nested deeper than ``max_depth`` (arrays and objects): refused. A text with fewer opening
  brackets than the limit cannot be that deep and is parsed without more ado; otherwise the
  parser's own recursion guard stops a hostile nesting (100,000 levels) at about a thousand,
  and the parsed value is measured without recursion. Nothing downstream (validation, pickling
  to a scoring process, a scorer) ever sees a value deeper than the limit, so none of them can
  hit ``RecursionError``;
- a string holding a lone surrogate (``"\\ud800"``, valid JSON but not valid Unicode text, which
  fails later when the value is encoded) is refused, naming where it is.

Every refusal is ``InvalidInput`` whose message starts with ``name`` (and the path inside the
value), so the transports answer INVALID_ARGUMENT / 422. Pure; the text-game data has depth 8.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rlvr_world.rewards.types import InvalidInput

#: Deepest nesting accepted (the project's real data reaches 8).
MAX_DEPTH = 64
#: Longest JSON text accepted where no tighter limit applies, in characters.
MAX_BYTES = 16 * 1024 * 1024
#: A ``\uD800``-``\uDFFF`` escape: the only way JSON text carries a surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def might_be_too_deep(text: str | bytes, max_depth: int = MAX_DEPTH) -> bool:
    """False when ``text`` has too few opening brackets to nest deeper than ``max_depth``."""
    if isinstance(text, bytes):
        return text.count(b"[") + text.count(b"{") > max_depth
    return text.count("[") + text.count("{") > max_depth


def has_surrogate_escape(text: str | bytes) -> bool:
    """Whether ``text`` holds a ``\\ud800``-``\\udfff`` escape (a lone surrogate once decoded,
    unless a pair)."""
    if isinstance(text, bytes):
        return _SURROGATE_ESCAPE_BYTES.search(text) is not None
    return _SURROGATE_ESCAPE.search(text) is not None


def _where(name: str, path: list[str | int]) -> str:
    out = name
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _bad_text(value: str) -> bool:
    if value.isascii():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_value(value: Any, name: str, max_depth: int = MAX_DEPTH) -> None:
    """``InvalidInput`` when a parsed value nests deeper than ``max_depth`` or holds a string
    that is not valid Unicode text; no recursion."""
    stack: list[tuple[Any, int, list[str | int]]] = [(value, 0, [])]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            if _bad_text(item):
                raise InvalidInput(f"{_where(name, path)}: text holds a lone surrogate")
            continue
        if not isinstance(item, dict | list):
            continue
        if depth >= max_depth:
            raise InvalidInput(f"{name}: JSON nested deeper than {max_depth} levels")
        if isinstance(item, dict):
            for key, child in item.items():
                if _bad_text(key):
                    raise InvalidInput(f"{_where(name, path)}: a key holds a lone surrogate")
                stack.append((child, depth + 1, [*path, key]))
        else:
            stack.extend((child, depth + 1, [*path, i]) for i, child in enumerate(item))


def loads_bounded(
    text: str | bytes, name: str, *, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES
) -> object:
    """``json.loads(text)`` within the limits of the module docstring; ``InvalidInput`` naming
    ``name`` otherwise."""
    if len(text) > max_bytes:
        raise InvalidInput(f"{name}: {len(text)} bytes of JSON exceed the limit of {max_bytes}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{name}: not valid JSON ({exc.msg} at char {exc.pos})") from None
    except RecursionError:
        raise InvalidInput(f"{name}: JSON nested deeper than {max_depth} levels") from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{name}: not UTF-8 text ({exc.reason})") from None
    if might_be_too_deep(text, max_depth) or has_surrogate_escape(text):
        check_value(value, name, max_depth)
    return value
