"""Web F1 reward: paper parity on the golden file, and what strict normalises (and why)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_world.rewards.types import Status
from rlvr_world.rewards.web import MAX_TEXT_CHARS, hungarian_matches, score_web
from tests.helpers.shared import read_jsonl, shared_dir

TRUTH = (
    "New items:\n[1273] StaticText 'Vortex Running Shoes'\n[1272] button 'Search'\n\n"
    "Deleted items:\nNone\n\n"
    "Updated items:\n[1220] textbox '' focused: True\n[8] link 'DASHBOARD'"
)
EOS = "<｜end▁of▁sentence｜>"


def test_golden_web_paper_parity() -> None:
    cases = list(read_jsonl(shared_dir() / "golden" / "golden_web.jsonl"))
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
