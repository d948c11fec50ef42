"""Web F1 reward: paper parity on the golden file, and what strict normalises (and why)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_world.rewards.types import Status
from rlvr_world.rewards.web import (
    MAX_TEXT_CHARS,
    _similarities,
    hungarian_matches,
    item_similarity,
    score_web,
)
from tests.helpers.shared import read_jsonl, shared_file

TRUTH = (
    "New items:\n[1273] StaticText 'Vortex Running Shoes'\n[1272] button 'Search'\n\n"
    "Deleted items:\nNone\n\n"
    "Updated items:\n[1220] textbox '' focused: True\n[8] link 'DASHBOARD'"
)
EOS = "<｜end▁of▁sentence｜>"


def test_golden_web_paper_parity() -> None:
    cases = list(read_jsonl(shared_file("golden", "golden_web.jsonl")))
    assert len(cases) == 44
    for case in cases:
        got = score_web(case["response"], case["ground_truth"], variant="paper", p=case["p"])
        # f1_dispatch is null where p is not the default: the dispatcher cannot pass p.
        assert abs(got.reward - case["f1"]) <= 1e-9, case["id"]
        if case["f1_dispatch"] is not None:
            assert case["f1_dispatch"] == case["f1"]
        for name, counts in case["sections"].items():
            assert counts["gt"] >= 0, name
        total_match = sum(c["match"] for c in case["sections"].values())
        assert got.metrics["matched_items"] == total_match, case["id"]
        assert got.metrics["target_items"] == sum(c["gt"] for c in case["sections"].values())


def test_exact_answer_scores_one_in_both_variants() -> None:
    for variant in ("paper", "strict"):
        got = score_web("Some reasoning.\n" + TRUTH, TRUTH, variant=variant)
        assert got.status is Status.OK
        assert got.reward == 1.0
        assert got.metrics["precision"] == got.metrics["recall"] == 1.0


def test_eos_glued_to_last_item_breaks_paper_not_strict() -> None:
    """docs/reference.md#quirks, Q6: verl decodes without skip_special_tokens, so the EOS text
    sticks to the last line. It is not part of the model's answer; strict removes it."""
    paper = score_web(TRUTH + EOS, TRUTH, variant="paper")
    strict = score_web(TRUTH + EOS, TRUTH, variant="strict")
    assert paper.reward == pytest.approx(2 * (4 / 5) * (4 / 5) / (8 / 5))  # 1 of 5 items broken
    assert strict.reward == 1.0


@pytest.mark.parametrize("eos", [EOS, "<|eos|>", "</s>"])
def test_strict_removes_each_known_eos_including_the_tiny_models(eos: str) -> None:
    """``<|eos|>`` is the end of this project's tiny models: a web run's answers end with it (the
    pipeline decodes keeping special tokens), and it used to break the last item of every one."""
    from rlvr_world.web.items import NO_CHANGE_ANSWER, predicts_no_change

    assert score_web(TRUTH + eos, TRUTH, variant="strict").reward == 1.0
    assert score_web(NO_CHANGE_ANSWER + eos, NO_CHANGE_ANSWER, variant="strict").reward == 1.0
    assert predicts_no_change(NO_CHANGE_ANSWER + eos)


def test_strict_header_variants_are_headers() -> None:
    """A line like '**New Items:**' can only be a header; the paper drops its items."""
    pred = TRUTH.replace("New items:", "**New Items:**").replace("Updated items:", "### Updated")
    pred = pred.replace("### Updated", "### Updated items:")
    assert score_web(pred, TRUTH, variant="strict").reward == 1.0
    assert score_web(pred, TRUTH, variant="paper").reward < 1.0


def test_strict_inline_header_text_is_an_item() -> None:
    pred = TRUTH.replace("Deleted items:\nNone", "Deleted items: None")
    assert score_web(pred, TRUTH, variant="strict").reward == 1.0
    paper = score_web(pred, TRUTH, variant="paper")
    assert paper.metrics["matched_items"] == 4


def test_strict_repeated_header_last_answer_wins() -> None:
    """A draft followed by a corrected answer: the paper merges both (extra items cost
    precision); strict scores the final one."""
    draft = "New items:\n[9] button 'Wrong'\n\n"
    got = score_web(draft + TRUTH, TRUTH, variant="strict")
    assert got.reward == 1.0
    assert score_web(draft + TRUTH, TRUTH, variant="paper").reward < 1.0


def test_strict_ignores_drafts_inside_reasoning() -> None:
    pred = "<think>New items:\n[9] button 'Wrong'\n</think>\n" + TRUTH
    assert score_web(pred, TRUTH, variant="strict").reward == 1.0


def test_strict_bullets_and_double_spaces_normalised_but_quotes_not() -> None:
    bullets = TRUTH.replace("[1273]", "- [1273]").replace("focused: True", "focused:  True")
    assert score_web(bullets, TRUTH, variant="strict").reward == 1.0
    quotes = TRUTH.replace("'Search'", '"Search"')
    assert score_web(quotes, TRUTH, variant="strict").metrics["matched_items"] == 4


def test_no_header_is_unparseable_with_zero_reward() -> None:
    for variant in ("paper", "strict"):
        got = score_web("I think the page will change.", TRUTH, variant=variant)
        assert got.status is Status.UNPARSEABLE
        assert got.reward == 0.0
        assert "header" in got.message


def test_bad_ground_truth_and_options() -> None:
    got = score_web(TRUTH, "not a diff", variant="strict")
    assert got.status is Status.INVALID_INPUT
    assert "ground_truth" in got.message
    assert score_web(TRUTH, TRUTH, variant="fast").status is Status.INVALID_INPUT
    huge = "x" * (MAX_TEXT_CHARS + 1)
    assert score_web(huge, TRUTH).status is Status.UNPARSEABLE
    assert score_web(TRUTH, huge).status is Status.INVALID_INPUT


def test_hungarian_threshold_cases() -> None:
    truth, pred = {"a", "b", "c"}, {"a", "x"}
    assert hungarian_matches(truth, pred, 0.0) == 1
    assert hungarian_matches(truth, pred, 9999.0) == 1
    assert hungarian_matches(truth, pred, 10000.0) == 2
    assert hungarian_matches(truth, pred, -1.0) == 0
    assert hungarian_matches(set(), pred, 0.0) == 0


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=2000), variant=st.sampled_from(["paper", "strict"]))
def test_any_text_gets_a_status_and_finite_reward(text: str, variant: str) -> None:
    got = score_web(text, TRUTH, variant=variant)
    assert got.status in (Status.OK, Status.UNPARSEABLE)
    assert math.isfinite(got.reward) and 0.0 <= got.reward <= 1.0


@settings(max_examples=50, deadline=None)
@given(raw=st.binary(max_size=3000))
def test_arbitrary_bytes_as_ground_truth_never_raise(raw: bytes) -> None:
    text = raw.decode("utf-8", errors="replace")
    got = score_web(text, text, variant="strict")
    assert isinstance(got.status, Status)
    assert math.isfinite(got.reward)


CHANGED = "New items:\n[7] button 'OK'\n\nDeleted items:\nNone\n\nUpdated items:\nNone"
UNCHANGED = "New items:\nNone\n\nDeleted items:\nNone\n\nUpdated items:\nNone"


def test_item_f1_pays_nothing_for_none_on_a_changed_page() -> None:
    """The paper's F1 counts the ``None`` markers as items: answering ``None`` everywhere on a
    changed page earns 2 of 3 predicted items right (F1 0.667); ``item_f1`` scores it 0."""
    paper = score_web(UNCHANGED, CHANGED)
    assert paper.status is Status.OK and paper.reward == pytest.approx(2 / 3)
    items = score_web(UNCHANGED, CHANGED, reward_type="item_f1")
    assert items.reward == 0.0 and items.metrics["f1"] == pytest.approx(2 / 3)
    assert score_web(UNCHANGED, UNCHANGED, reward_type="item_f1").reward == 1.0
    assert score_web(CHANGED, UNCHANGED, reward_type="item_f1").reward == 0.0
    assert score_web(CHANGED, CHANGED, reward_type="item_f1").reward == 1.0
    half = "New items:\n[7] button 'OK'\n[8] link 'x'\nDeleted items:\nNone\nUpdated items:\nNone"
    assert score_web(half, CHANGED, reward_type="item_f1").reward == pytest.approx(2 / 3)
    assert score_web("no sections", CHANGED, reward_type="item_f1").status is Status.UNPARSEABLE


def test_soft_item_f1_credits_near_misses_and_keeps_the_none_rules() -> None:
    """``soft_item_f1``: exact answers score as ``item_f1``; a near miss gets the token F1 of the
    best one-to-one pairing within its section; ``None`` on a changed page still earns 0."""
    kind = {"reward_type": "soft_item_f1"}
    assert score_web(CHANGED, CHANGED, **kind).reward == 1.0
    assert score_web(UNCHANGED, UNCHANGED, **kind).reward == 1.0
    assert score_web(UNCHANGED, CHANGED, **kind).reward == 0.0
    assert score_web(CHANGED, UNCHANGED, **kind).reward == 0.0
    near = (
        "New items:\n[7] button 'OK' focused: True\n\nDeleted items:\nNone\n\nUpdated items:\nNone"
    )
    got = score_web(near, CHANGED, **kind)
    # 3 tokens shared of 3 and 5: token F1 6/8, one item each side
    assert got.reward == pytest.approx(0.75) and got.metrics["item_f1"] == 0.0
    wrong_section = "New items:\nNone\n\nDeleted items:\n[7] button 'OK'\n\nUpdated items:\nNone"
    assert score_web(wrong_section, CHANGED, **kind).reward == 0.0
    two = (
        "New items:\n[8] link 'x'\n[7] button 'OK'\n\nDeleted items:\nNone\n\nUpdated items:\nNone"
    )
    # the pairing takes the exact item: credit 1 over 2 predicted + 1 true items
    assert score_web(two, CHANGED, **kind).reward == pytest.approx(2 / 3)
    assert score_web(two, CHANGED).metrics["soft_item_f1"] == pytest.approx(2 / 3)
    assert score_web("no sections", CHANGED, **kind).status is Status.UNPARSEABLE


def test_soft_item_f1_of_a_runaway_answer_stays_bounded() -> None:
    items = "\n".join(f"[{i}] button 'OK {i}'" for i in range(600))
    got = score_web(
        f"New items:\n{items}\nDeleted items:\nNone\nUpdated items:\nNone",
        CHANGED,
        reward_type="soft_item_f1",
    )
    assert got.status is Status.OK and 0.0 < got.reward < 0.01


def _token_f1_by_hand(a: str, b: str) -> float:
    """Token F1 of two items, pair by pair with ``Counter``: what the matrix must equal."""
    from collections import Counter

    if a == b:
        return 1.0
    ta, tb = Counter(a.split()), Counter(b.split())
    shared = sum((ta & tb).values())
    return 0.0 if not shared else 2 * shared / (sum(ta.values()) + sum(tb.values()))


_WORDS = st.sampled_from(["button", "link", "'OK'", "[3]", "[12]", "StaticText", "a", ""])
_ITEMS = st.lists(st.lists(_WORDS, max_size=6).map(" ".join), max_size=8, unique=True)


@settings(max_examples=300, deadline=None)
@given(true_items=_ITEMS, pred_items=_ITEMS)
def test_the_similarity_matrix_equals_the_pairwise_token_f1_exactly(
    true_items: list[str], pred_items: list[str]
) -> None:
    """``soft_item_f1``'s matrix (one product per repeat count, no loop over pairs) is the token
    F1 of every pair to the last bit: repeated tokens, empty items and identical items too."""
    sim = _similarities(true_items, pred_items)
    assert sim.shape == (len(true_items), len(pred_items))
    for i, t in enumerate(true_items):
        for j, q in enumerate(pred_items):
            assert sim[i, j] == _token_f1_by_hand(t, q), (t, q)
            assert item_similarity(t, q) == _token_f1_by_hand(t, q)


@pytest.mark.parametrize("kind", ["binary", "task_specific", "F1"])
def test_a_reward_type_of_another_task_is_refused_naming_the_web_types(kind: str) -> None:
    result = score_web(CHANGED, CHANGED, reward_type=kind)
    assert result.status is Status.INVALID_INPUT and result.reward == 0.0
    assert "expected one of f1, item_f1, soft_item_f1" in (result.message or "")


def test_dispatch_gives_each_task_its_default_reward_type() -> None:
    from rlvr_world.rewards.dispatch import score_mapping

    web = {"data_source": "web_agent", "solution_str": UNCHANGED, "ground_truth": CHANGED}
    assert score_mapping(web).reward == pytest.approx(2 / 3)  # f1, the paper's
    assert score_mapping(web | {"reward_type": "item_f1"}).reward == 0.0
    refused = score_mapping(web | {"reward_type": "binary"})
    assert refused.status is Status.INVALID_INPUT
    game = {"data_source": "text_game", "solution_str": "{}", "ground_truth": "{}"}
    assert "reward_type: unknown 'item_f1'" in (
        score_mapping(game | {"reward_type": "item_f1"}).message or ""
    )
