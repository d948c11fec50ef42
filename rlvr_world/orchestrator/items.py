"""What the orchestrator feeds the rollout service: one ``PromptItem`` per dataset prompt.

An item carries everything needed to score a response through the reward service (a verl-style
``data_source`` / ``ground_truth`` / ``extra_info``) and, for SFT, the target text the model should
produce. Builders cover the text game (compact or paper prompt, state-diff target, the current
state in ``extra_info.data_state`` as the paper's rows do) and the web task (rendered diff).
Items round-trip through JSON Lines (``save_items`` / ``load_items``). Pure: no I/O but the files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlvr_world.tasks.text_game import DATA_SOURCE, Transition, build_compact_prompt, to_verl_row

__all__ = ["ANSWER_PREFIX", "PromptItem", "load_items", "save_items", "text_game_item", "web_item"]

#: What a target answer starts with (both reward variants look for it).
ANSWER_PREFIX = "The final answer is: "
WEB_DATA_SOURCE = "web_agent"


@dataclass(frozen=True)
class PromptItem:
    """One prompt with its verifiable reference."""

    prompt_id: str
    task: str  # "text_game" | "web"
    data_source: str  # the reward dispatch key (verl's data_source)
    prompt: str
    ground_truth: str
    target: str  # the answer an SFT step trains on (no end-of-sequence text)
    extra_info: dict[str, Any] = field(default_factory=dict)
    changed: bool | None = None  # text game: the paper's gold label; None where not defined

    def reward_row(self, response: str) -> dict[str, Any]:
        """The verl-style mapping the reward service scores."""
        return {
            "data_source": self.data_source,
            "solution_str": response,
            "ground_truth": self.ground_truth,
            "extra_info": self.extra_info,
        }


def diff_answer(diff: Mapping[str, Any]) -> str:
    """The SFT target of a text-game diff: the answer phrase and compact JSON."""
    return ANSWER_PREFIX + json.dumps(diff, separators=(",", ":"), ensure_ascii=False)


def text_game_item(
    t: Transition,
    prompt_id: str,
    *,
    prompt: str | None = None,
    split: str = "train",
    index: int = 0,
) -> PromptItem:
    """A text-game item: the compact prompt unless ``prompt`` is given (e.g. the paper's)."""
    text = prompt if prompt is not None else build_compact_prompt(t)
    row = to_verl_row(t, text, split, index)
    return PromptItem(
        prompt_id=prompt_id,
        task="text_game",
        data_source=DATA_SOURCE,
        prompt=text,
        ground_truth=str(row["reward_model"]["ground_truth"]),
        target=diff_answer(t.diff()),
        extra_info=dict(row["extra_info"]),
        changed=t.changed,
    )


def web_item(prompt_id: str, prompt: str, rendered_diff: str) -> PromptItem:
    """A web item: the prompt (``tasks.web.build_web_prompt``) and the rendered diff to match."""
    return PromptItem(
        prompt_id=prompt_id,
        task="web",
        data_source=WEB_DATA_SOURCE,
        prompt=prompt,
        ground_truth=rendered_diff,
        target=rendered_diff,
    )


def save_items(items: Iterable[PromptItem], path: Path) -> int:
    """Write items as JSON Lines; returns how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(asdict(item), ensure_ascii=False) + "\n")
            count += 1
    return count


def load_items(path: Path) -> list[PromptItem]:
    """Read items written by ``save_items``; ``ValueError`` names the line and field."""
    items: list[PromptItem] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                items.append(PromptItem(**json.loads(line)))
            except (json.JSONDecodeError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a prompt item: {exc}") from exc
    return items
