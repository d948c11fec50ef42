"""Fuzz targets: the parsers that take bytes or text straight from a caller or a model.

Each target takes the fuzzer's bytes and checks the parser's contract; a broken contract raises,
which the fuzzer records as a crash (with the input that caused it):

- ``rawbatch``: ``split_requests`` on any bytes raises ``InvalidInput`` or returns entries that
  lie inside the data; ``peek_task`` never raises; the scoring process's ``score_raw_chunk``
  never raises and answers every request it scored or names the first invalid one;
- ``text_game``: the answer parsers (paper and strict) never raise, and scoring the text as an
  answer against a fixed real game state gives a finite, non-negative reward (``task_specific``
  adds the score's share, so above 1 is possible) and a known status, in both variants and
  reward types;
- ``web``: the section parsers never raise, and scoring gives a finite reward in [0, 1], as the
  answer and as the reference (a bad reference may be ``invalid_input``, never an exception).

Every target also checks that a failed score is never an ``ok``: anything but ``ok`` has reward 0.

Pure; imported by ``tests.fuzz.run`` under atheris' instrumentation.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr_world.rewards.dispatch import TextScoreRequest, score_text
from rlvr_world.rewards.text_game.extract import paper_parse, strict_parse
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status
from rlvr_world.rewards.web import parse_sections_paper, parse_sections_strict
from services.reward.rawbatch import (
    RawChunk,
    parse_entry,
    peek_task,
    score_raw_chunk,
    split_requests,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "score_requests.jsonl"
WEB_TRUTH = "New items:\nNone\n\nDeleted items:\n[3] button 'Go'\n\nUpdated items:\nNone"


def _game_row() -> dict[str, Any]:
    for line in EXAMPLES.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # the examples hold malformed lines on purpose
            continue
        if isinstance(row, dict) and row.get("data_source") == "llm_simulator":
            return dict(row)
    raise RuntimeError(f"no llm_simulator row in {EXAMPLES}")


GAME = _game_row()


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _check(result: RewardResult, most: float = 1.0) -> None:
    assert isinstance(result.status, Status), result
    assert math.isfinite(result.reward) and 0.0 <= result.reward <= most, result
    assert result.status is Status.OK or result.reward == 0.0, result


def rawbatch(data: bytes) -> None:
    try:
        entries = split_requests(data)
    except InvalidInput:
        entries = []
    for entry in entries:
        assert 0 <= entry.tag < entry.body <= entry.end <= len(data), entry
        peek_task(data, entry)
        with contextlib.suppress(InvalidInput):  # a malformed entry: the documented answer
            parse_entry(data, entry)
    answer = score_raw_chunk(RawChunk(data, join=False))
    assert isinstance(answer.entries, list)
    if answer.rejected is not None:
        index, message = answer.rejected
        assert index >= 0 and message, answer.rejected


def text_game(data: bytes) -> None:
    text = _text(data)
    paper_parse(text)
    strict_parse(text)
    for variant in ("paper", "strict"):
        for reward_type in ("binary", "task_specific"):
            req = TextScoreRequest(
                data_source="llm_simulator",
                solution_str=text,
                ground_truth=GAME["ground_truth"],
                extra_info=GAME["extra_info"],
                variant=variant,
                reward_type=reward_type,
            )
            _check(score_text(req), most=math.inf)


def web(data: bytes) -> None:
    text = _text(data)
    parse_sections_paper(text)
    parse_sections_strict(text)
    for variant in ("paper", "strict"):
        for answer, truth in ((text, WEB_TRUTH), (WEB_TRUTH, text)):
            req = TextScoreRequest(
                data_source="web_agent", solution_str=answer, ground_truth=truth, variant=variant
            )
            _check(score_text(req))


TARGETS: dict[str, Callable[[bytes], None]] = {
    "rawbatch": rawbatch,
    "text_game": text_game,
    "web": web,
}
