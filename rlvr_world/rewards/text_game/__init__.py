"""Text-game state-prediction reward (ByteSized32 / GPT-simulator, verl ``llm_simulator``).

``score_text_game`` scores a decoded response that ends with the predicted diff
``{"modified": [...], "removed": [...], "score": {...}}`` against the next state
(``ground_truth``) given the current one (``extra_info["data_state"]``).

* ``variant="paper"`` reproduces the reference code result for result (``paper.py``);
* ``variant="strict"`` (the default) fixes the reference's text-game bugs (``strict.py``).

``reward_type`` is ``binary`` (exact match) or ``task_specific``
(docs/reference.md#text-game-reward, step 9). The function never raises: a malformed reference or
option is ``invalid_input`` naming the field, a response that cannot be decoded is ``unparseable``
(reward 0), and a failure inside scoring is ``error``; a zero reward with status ``ok`` always means
a scored, wrong answer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from rlvr_world.rewards.text_game.common import (
    MAX_RESPONSE_CHARS,
    REWARD_TYPES,
    VARIANTS,
    load_inputs,
)
from rlvr_world.rewards.text_game.paper import score_paper
from rlvr_world.rewards.text_game.strict import score_strict
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status, failed

__all__ = ["score_text_game"]

logger = logging.getLogger(__name__)


def score_text_game(
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | str | None,
    *,
    variant: str = "strict",
    reward_type: str = "binary",
) -> RewardResult:
    """Reward for one text-game prediction; see the module docstring. Never raises."""
    problem = _check_options(solution_str, variant, reward_type)
    if problem:
        return failed(Status.INVALID_INPUT, problem)
    try:
        inputs = load_inputs(ground_truth, extra_info)
    except InvalidInput as exc:
        return failed(Status.INVALID_INPUT, str(exc))
    except Exception as exc:  # a reference so odd that validation itself failed
        return failed(Status.INVALID_INPUT, f"ground_truth/extra_info: {type(exc).__name__}")
    if len(solution_str) > MAX_RESPONSE_CHARS:
        return failed(
            Status.UNPARSEABLE,
            f"solution_str: {len(solution_str)} characters, over the {MAX_RESPONSE_CHARS} limit",
        )
    scorer = score_paper if variant == "paper" else score_strict
    try:
        return scorer(solution_str, inputs, reward_type)
    except Exception as exc:  # safety net: a scorer bug must not take down a batch
        logger.warning("text-game %s scorer failed: %s: %s", variant, type(exc).__name__, exc)
        return failed(Status.ERROR, f"scoring failed: {type(exc).__name__}: {exc}"[:300])


def _check_options(solution_str: Any, variant: Any, reward_type: Any) -> str:
    if variant not in VARIANTS:
        return f"variant: unknown {variant!r}; expected one of {', '.join(VARIANTS)}"
    if reward_type not in REWARD_TYPES:
        return f"reward_type: unknown {reward_type!r}; expected one of {', '.join(REWARD_TYPES)}"
    if not isinstance(solution_str, str):
        return f"solution_str: expected a string, got {type(solution_str).__name__}"
    return ""
