"""Learning guard (web): GRPO through the real services raises the F1 of a small page-change task.

The pages are synthetic accessibility trees (``rlvr_world.tasks.web``'s format): a settings page
with checkboxes and a Save button; the action clicks a checkbox, and the true next state updates
that one line (``checked: false`` <-> ``true``): New and Deleted ``None``, Updated the new line.
Items are built by the real recipe (``web_transition_item``: the compact prompt, the rendered
diff as target) and scored by the reward service's strict web F1 (the paper's, ``None`` sections
counted), so a right answer earns 1.0 and the start model's usual wrong one ("a status line
appears and the Save button goes": every section wrong) earns 0.0.

The start is a tiny model SFT-trained on answers that are right one time in five. GRPO runs as
``rlvr-world run`` runs it, one step at a time (``tests.helpers.guard_stack``): the rollout,
decoder and reward services on loopback, the orchestrator, the Redis stream, the trainer in this
process, its published weights reloaded by the rollout service before the next step. The mean
train F1 of the first 3 steps must be at most ``START_BAR`` and that of the last 8 at least
``END_BAR`` (bars and measurements: docs/testing.md#learning-guards).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rlvr_world.apps.orchestrator.config import OrchestratorConfig
from rlvr_world.items import PromptItem
from rlvr_world.queue.schema import ScoredGroup
from rlvr_world.tasks.web import TreeDiff, WebTransition, render_diff
from rlvr_world.tiny_model import TinyLMConfig, build_tiny_lm
from rlvr_world.web.items import web_transition_item
from tests.helpers.guard_report import record
from tests.helpers.guard_stack import guard_loop

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

GUARD = "web"
#: Settings pages; each has the same two checkboxes, both unticked.
PAGES = ("Display", "Sound", "Privacy", "Mail", "Backup", "Network", "Calendar", "Profile")
BOXES = ("Enabled", "Visible")
SAVE = "[19] button 'Save'"
#: Of each item's ``COPIES`` SFT examples, this many are the right answer (else ``WRONG_ANSWER``).
RIGHT_COPIES, COPIES = 2, 10
SFT_EPOCHS = 30
STEPS, GROUPS_PER_STEP, GROUP_SIZE, LR = 30, 4, 8, 5e-4
START_BAR, END_BAR = 0.35, 0.7
#: F1 over tree items (``rlvr_world.rewards.web``): the ``None`` markers earn nothing.
REWARD_TYPE = "item_f1"


def transition(page: int, box: int) -> WebTransition:
    """Click checkbox ``box`` of page ``page``: it becomes checked."""
    title = PAGES[page]

    def tree(clicked: bool) -> str:
        lines = [f"Tab 0 (current): {title}", f"[1] RootWebArea '{title}' focused: True"]
        for b, name in enumerate(BOXES):
            on = clicked and b == box
            lines.append(f"\t[{11 + b}] checkbox '{name}' checked: {str(on).lower()}")
        lines.append(f"\t{SAVE}")
        return "\n".join(lines)

    return WebTransition(
        source="guard",
        objective=f"Change the {title.lower()} settings",
        url=f"http://settings.test/{title.lower()}",
        previous_actions=(),
        action=f"click [{11 + box}]",
        obs_before=tree(False),
        obs_after=tree(True),
        recorded_diff=None,
    )


#: The start model's usual mistake: the click removes the Save button and nothing updates.
WRONG_ANSWER = render_diff(TreeDiff(deleted=(SAVE,)))


def web_items() -> dict[tuple[int, int], PromptItem]:
    """One item per (page, checkbox)."""
    return {
        (p, b): web_transition_item(transition(p, b), f"page{p}-box{b}")
        for p in range(len(PAGES))
        for b in range(len(BOXES))
    }


def warm_model(root: Path, items: dict[tuple[int, int], PromptItem]) -> Path:
    """SFT on each item's answer ``RIGHT_COPIES`` times and ``wrong_answer`` for the rest of its
    ``COPIES`` examples (the same share for every item: a share drawn at random left some items
    with no right example, so their groups never had a reward to learn from)."""
    from trainer.sft import SftConfig, run_sft

    pairs = [
        (item.prompt, item.target if copy < RIGHT_COPIES else WRONG_ANSWER)
        for item in items.values()
        for copy in range(COPIES)
    ]
    corpus = [i.prompt for i in items.values()] + [i.target for i in items.values()]
    shape = TinyLMConfig(
        vocab_size=512, hidden_size=64, num_layers=2, num_heads=2, max_positions=512
    )
    base = build_tiny_lm(root / "base", corpus, shape)
    cfg = SftConfig(epochs=SFT_EPOCHS, lr=3e-3, batch_size=16, warmup_steps=5, torch_threads=1)
    return run_sft(base, pairs, root / "sft", cfg).path


def inverted(group: ScoredGroup, kind: str, *, masked: bool) -> ScoredGroup:
    """A poison copy of ``group`` (id ``poison-<kind>-<id>``): every reward ``1 - r``, and with
    ``masked`` every token forced (``loss_mask`` 0)."""
    samples = [
        s.model_copy(
            update={
                "reward": None if s.reward is None else 1.0 - s.reward,
                "loss_mask": [0] * len(s.token_ids) if masked else s.loss_mask,
            }
        )
        for s in group.samples
    ]
    return group.model_copy(
        update={"group_id": f"poison-{kind}-{group.group_id}", "samples": samples}
    )


@dataclass
class GuardRun:
    """What a run of the guard measured."""

    curve: list[float] = field(default_factory=list)
    stale_pushed: int = 0
    trained_poison: int = 0
    dropped: dict[str, int] = field(default_factory=dict)


async def train(root: Path, model: Path, items: list[PromptItem], seed: int) -> GuardRun:
    """GRPO from ``model``, ``STEPS`` steps of ``GROUPS_PER_STEP`` groups, each step with the
    poison groups of the module docstring."""
    trainer = {
        "optim": {"lr": LR},
        "grpo": {"kl_coef": 0.0},
        "batch": {"groups_per_step": 2 * GROUPS_PER_STEP, "micro_batch_size": 16},
        "queue": {"max_staleness": 1, "block_ms": 20},
        "run": {"total_steps": STEPS, "seed": seed},
    }
    orchestrator = OrchestratorConfig(
        group_size=GROUP_SIZE, max_tokens=64, seed=seed, reward_type=REWARD_TYPE
    )
    order = random.Random(seed)
    run = GuardRun()
    own: list[list[ScoredGroup]] = []
    async with guard_loop(root, model=model, trainer=trainer, orchestrator=orchestrator) as loop:
        for step in range(STEPS):
            stale = [inverted(g, "stale", masked=False) for g in own[-2]] if step > 1 else []
            result = await loop.step(
                order.sample(items, GROUPS_PER_STEP),
                before=stale,
                after=lambda groups: [inverted(g, "masked", masked=True) for g in groups],
            )
            run.curve.append(result.reward_mean)
            run.stale_pushed += len(stale)
            run.trained_poison += sum(g.group_id.startswith("poison-stale") for g in result.trained)
            own.append(result.own)
        run.dropped = dict(loop.trainer.state.dropped)
    return run


def test_grpo_through_the_services_raises_the_f1_of_a_page_change_task(tmp_path: Path) -> None:
    items = web_items()
    assert all(item.changed for item in items.values())
    model = warm_model(tmp_path / "model", items)
    run = asyncio.run(train(tmp_path / "run", model, list(items.values()), seed=0))
    curve = run.curve
    start, end = sum(curve[:2]) / 2, sum(curve[-8:]) / 8
    record(GUARD, start=start, end=end, curve=curve, dropped=run.dropped)
    assert start <= START_BAR, f"the warm start should mostly be wrong: {curve[:2]}"
    assert end >= END_BAR, f"GRPO did not raise the F1: {start:.2f} -> {end:.2f} ({curve})"
    assert run.dropped.get("stale", 0) == run.stale_pushed, (
        f"{run.stale_pushed} stale groups pushed, the gate dropped {run.dropped}"
    )
