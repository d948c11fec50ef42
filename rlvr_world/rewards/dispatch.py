"""Route a verl-style reward request to its scorer through an explicit table.

Request fields follow verl's ``compute_score(data_source, solution_str, ground_truth, extra_info)``:
``data_source`` is ``llm_simulator`` (text game) or ``web_agent`` (web) as in the paper's verl data;
the task names ``text_game`` and ``web`` are accepted as well. Video requests carry frames and go
through ``rlvr_world.rewards.video.score_video`` (the reward service maps them there).

This module validates request *shape* (raising ``InvalidInput`` at the boundary); scorers never
raise on a bad prediction, they return a status.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr_world.rewards.types import InvalidInput, RewardResult, Status, failed

Variant = Literal["paper", "strict"]
#: text game: binary (its default) | task_specific; web: f1 (its default) | item_f1 | soft_item_f1.
RewardType = Literal["binary", "task_specific", "f1", "item_f1", "soft_item_f1"]

#: verl ``data_source`` (and our task names) -> task.
DATA_SOURCE_TO_TASK: dict[str, str] = {
    "llm_simulator": "text_game",
    "text_game": "text_game",
    "web_agent": "web",
    "web": "web",
}


class TextScoreRequest(BaseModel):
    """One verl-style request for a text task (a JSON Lines row of ``rlvr-world reward score``)."""

    model_config = ConfigDict(extra="forbid")

    data_source: str = Field(description="llm_simulator | web_agent (or text_game | web)")
    solution_str: str = Field(description="the decoded model output")
    ground_truth: str = Field(description="text game: JSON of the next state; web: the diff text")
    extra_info: dict[str, Any] | None = Field(
        default=None, description="text game: needs data_state (JSON of the current state)"
    )
    variant: Variant = Field(default="strict", description="paper reproduces the reference code")
    reward_type: RewardType | None = Field(
        default=None,
        description="text game: binary (None: default) | task_specific; web: f1 (None: default) "
        "| item_f1 | soft_item_f1",
    )


TextScorer = Callable[[TextScoreRequest], RewardResult]


def _score_text_game(req: TextScoreRequest) -> RewardResult:
    from rlvr_world.rewards.text_game import score_text_game

    return score_text_game(
        req.solution_str,
        req.ground_truth,
        req.extra_info,
        variant=req.variant,
        reward_type=req.reward_type or "binary",
    )


def _score_web(req: TextScoreRequest) -> RewardResult:
    from rlvr_world.rewards.web import score_web

    return score_web(
        req.solution_str, req.ground_truth, variant=req.variant, reward_type=req.reward_type
    )


#: task -> scorer. Explicit on purpose: no plugin registry.
TEXT_SCORERS: dict[str, TextScorer] = {
    "text_game": _score_text_game,
    "web": _score_web,
}


def task_of(data_source: str) -> str:
    """The task for a verl ``data_source``; ``InvalidInput`` naming the known ones otherwise."""
    try:
        return DATA_SOURCE_TO_TASK[data_source]
    except KeyError:
        known = ", ".join(sorted(DATA_SOURCE_TO_TASK))
        raise InvalidInput(
            f"data_source: unknown {data_source!r}; expected one of {known}"
        ) from None


def score_text(req: TextScoreRequest) -> RewardResult:
    """Score one validated request. Never raises for a bad prediction or reference."""
    try:
        scorer = TEXT_SCORERS[task_of(req.data_source)]
    except InvalidInput as exc:
        return failed(Status.INVALID_INPUT, str(exc))
    return scorer(req)


def score_mapping(row: Mapping[str, Any]) -> RewardResult:
    """Validate a raw mapping (a JSON line, an HTTP body) and score it; bad shape: invalid_input."""
    from pydantic import ValidationError

    try:
        req = TextScoreRequest.model_validate(row)
    except ValidationError as exc:
        return failed(Status.INVALID_INPUT, describe_validation_error(exc))
    return score_text(req)


def describe_validation_error(exc: Any) -> str:
    """One line per pydantic error, each naming the field path."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or "<request>"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)
