"""Web prompt items through the real reward service (gRPC on loopback): every target answer of
the shared MiniWoB++ and WebArena transitions scores F1 = 1, strict and paper, and a
``None``-everywhere answer to a changed transition scores less."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlvr_world.client import RewardClient
from rlvr_world.items import PromptItem
from rlvr_world.rewards.types import Status
from rlvr_world.tasks.web import TreeDiff, load_web_transitions, render_diff
from rlvr_world.web.items import web_transition_item
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread
from tests.helpers.shared import shared_file

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client() -> Iterator[RewardClient]:
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1, max_batch=256)
    with ServiceThread(settings) as svc, RewardClient(svc.grpc_address) as c:
        yield c


def web_items(name: str) -> list[PromptItem]:
    path = shared_file("data", "web", name)
    return [web_transition_item(t, str(i)) for i, t in enumerate(load_web_transitions(path))]


@pytest.mark.parametrize("name", ["miniwob_transitions.jsonl", "webarena_transitions.jsonl"])
def test_targets_score_one_through_the_service(client: RewardClient, name: str) -> None:
    items = web_items(name)
    for variant in ("strict", "paper"):
        rows = [{**item.reward_row(item.target), "variant": variant} for item in items]
        for start in range(0, len(rows), 256):
            results = client.score_verl_batch(rows[start : start + 256])
            bad = [
                (items[start + i].prompt_id, r.status, r.reward)
                for i, r in enumerate(results)
                if r.status != Status.OK or r.reward != 1.0
            ]
            assert not bad, (variant, bad[:5])
    changed = next(item for item in items if item.changed)
    none_answer = client.score_verl(changed.reward_row(render_diff(TreeDiff())))
    assert none_answer.status == Status.OK and none_answer.reward < 1.0
