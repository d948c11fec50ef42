"""The rule-based web planner: goal terms, candidates, greedy and predicted values, ranking; the
web MPC headline and config. Trees are written as the collector serialises them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from rlvr_world.apps.mpc.web_config import WebMpcConfig
from rlvr_world.apps.mpc.web_report import web_mpc_headline, web_mpc_report
from rlvr_world.web.axtree import AxSnapshot, TreeLine
from rlvr_world.web.planning import (
    ScoredAction,
    candidates,
    element_text,
    goal_terms,
    greedy_value,
    predicted_value,
    rank,
)
from rlvr_world.web.policy import PlannedAction

NO_CHANGE = "New items:\nNone\n\nDeleted items:\nNone\n\nUpdated items:\nNone"


def tree(*rows: tuple[int, str, int, str, bool]) -> AxSnapshot:
    """(id, role, depth, text after the id, is a DOM element) per line."""
    return AxSnapshot(
        tuple(
            TreeLine(i, 100 + i if dom else None, role, depth, f"[{i}] {role} {rest}".rstrip())
            for i, role, depth, rest, dom in rows
        )
    )


CHECKBOXES = tree(
    (1, "StaticText", 0, "'Select ExLtkD, Q39 and click Submit.'", False),
    (2, "checkbox", 0, "'5sRzjZt' checked: false", True),
    (3, "checkbox", 0, "'ExLtkD' checked: false", True),
    (4, "checkbox", 0, "'Q39' checked: false", True),
    (5, "button", 0, "'Submit'", True),
    (6, "StaticText", 1, "'Submit'", False),
)
TEXT_FIELD = tree(
    (1, "StaticText", 0, "'Enter \"'", False),
    (2, "textbox", 0, "'' required: False", True),
    (3, "button", 0, "'Submit'", True),
)


def test_goal_terms_keep_quoted_phrases_and_content_words_in_order() -> None:
    g = goal_terms(
        'Enter the username "ignacio" and the password "UM" into the fields and press login.'
    )
    assert g.terms == ("ignacio", "um", "username", "password", "login")
    assert g.phrases == ("ignacio", "UM")
    assert goal_terms("Click button ONE, then click button TWO.").terms == ("one", "two")
    assert goal_terms("Select ExLtkD and click Submit.").terms == ("exltkd", "submit")
    assert goal_terms("Click on Tab #2.").terms == ("#2",)
    assert goal_terms('Click on the "Show More" link.').terms == ("show more",)
    # an utterance of instruction words only has no goal: every action is worth 0
    assert goal_terms("Expand the section below and click.").terms == ()


def test_goal_weights_fall_with_rank_and_reached_terms_leave() -> None:
    g = goal_terms("Select ExLtkD, Q39 and click Submit.")
    assert [g.weight(t) for t in g.terms] == [1.0, 0.5, pytest.approx(1 / 3)]
    left = g.remaining({"exltkd"})
    assert left.terms == ("q39", "submit") and left.weight("q39") == 1.0
    assert g.found_in("[3] checkbox 'ExLtkD'") == ["exltkd"]
    assert g.found_in("exltkdx") == []  # whole words only


def test_element_text_has_role_name_descendants_and_an_unnamed_elements_label() -> None:
    assert element_text(CHECKBOXES, 5) == "button Submit Submit"
    labelled = tree(
        (1, "checkbox", 0, "''", True),
        (2, "StaticText", 0, "'blue'", False),
        (3, "button", 0, "'OK'", True),
    )
    assert element_text(labelled, 1) == "checkbox blue"
    assert element_text(labelled, 3) == "button OK"
    assert element_text(labelled, 99) == ""


def test_candidates_rank_greedy_first_skip_acted_on_and_type_quoted_phrases() -> None:
    g = goal_terms("Select ExLtkD, Q39 and click Submit.")
    got = candidates(CHECKBOXES, g)
    assert [a.render() for a in got] == ["click [3]", "click [4]", "click [5]", "click [2]"]
    got = candidates(CHECKBOXES, g.remaining({"exltkd"}), acted_on={3}, limit=2)
    assert [a.render() for a in got] == ["click [4]", "click [5]"]
    g = goal_terms('Enter "Leonie" into the text field and press Submit.')
    got = candidates(TEXT_FIELD, g)
    assert [a.render() for a in got] == ["type [2] [Leonie] [0]", "click [3]", "click [2]"]
    assert greedy_value(TEXT_FIELD, got[0], g) == 1.0 and greedy_value(TEXT_FIELD, got[1], g) == 0.5
    # nothing left to act on: no candidates (the episode records "no_action")
    assert candidates(TEXT_FIELD, g, acted_on={2, 3}) == []


def test_a_click_wins_a_tie_with_typing_the_same_term() -> None:
    widgets = tree(
        (1, "textbox", 0, "'' required: False", True),
        (2, "radio", 0, "'4u' checked: false", True),
    )
    got = candidates(widgets, goal_terms('Click on a "radio" widget.'))
    assert got[0].render() == "click [2]"


def test_predicted_value_scores_new_and_updated_items_not_none_or_unreadable() -> None:
    g = goal_terms("Select ExLtkD, Q39 and click Submit.")
    checked = (
        "New items:\nNone\n\nDeleted items:\nNone\n\n"
        "Updated items:\n[3] checkbox 'ExLtkD' checked: true"
    )
    assert predicted_value(checked, CHECKBOXES, g) == 1.0
    assert predicted_value(NO_CHANGE, CHECKBOXES, g) == 0.0
    assert predicted_value("no headers at all", CHECKBOXES, g) == 0.0
    deleted = "New items:\nNone\n\nDeleted items:\n[3] checkbox 'ExLtkD'\n\nUpdated items:\nNone"
    assert predicted_value(deleted, CHECKBOXES, g) == 0.0  # deletions are worth nothing
    # an updated item named only by its id takes its descendants' text from the current tree
    by_id = (
        "New items:\nNone\n\nDeleted items:\nNone\n\nUpdated items:\n[5] button '' focused: True"
    )
    assert predicted_value(by_id, CHECKBOXES, g) == pytest.approx(1 / 3)


def test_rank_uses_predictions_then_greedy_so_a_none_model_plans_as_greedy() -> None:
    a, b, c = (PlannedAction("click", i) for i in (2, 3, 4))
    greedy = [ScoredAction(a, 0.0), ScoredAction(b, 1.0), ScoredAction(c, 0.5)]
    assert [s.action for s in rank(greedy)] == [b, c, a]
    none = [ScoredAction(s.action, s.greedy, 0.0, NO_CHANGE) for s in greedy]
    assert [s.action for s in rank(none)] == [b, c, a]
    informed = [ScoredAction(a, 0.0, 1.0), ScoredAction(b, 1.0, 0.0), ScoredAction(c, 0.5, 0.0)]
    assert [s.action for s in rank(informed)] == [a, b, c]


def rec(planner: str, task: str, index: int, success: bool, fault: str = "") -> dict[str, Any]:
    steps = (
        []
        if fault
        else [
            {
                "plan_seconds": 0.5,
                "action": "click [2]",
                "greedy_choice": "click [3]",
                "prediction": NO_CHANGE,
                "prediction_f1": 0.5,
            }
        ]
    )
    if planner == "greedy" and not fault:
        steps = [{"plan_seconds": 0.0, "action": "click [3]"}]
    return {
        "planner": planner,
        "task": task,
        "index": index,
        "status": "fault" if fault else "ok",
        "reason": fault,
        "success": success,
        "raw_reward": 1.0 if success else -1.0,
        "steps": steps,
    }


def test_headline_counts_faults_apart_and_pairs_planners_over_shared_episodes() -> None:
    rows = [rec("greedy", "t", i, i % 2 == 0) for i in range(4)]
    rows += [rec("base", "t", i, True) for i in range(3)]
    rows.append(rec("base", "t", 3, False, "browser_crash: no answer from the browser in 30 s"))
    rows += [rec("rlvr", "t", i, False, "model_unavailable: rlvr: missing") for i in range(4)]
    head = web_mpc_headline(rows, ("greedy", "base", "rlvr"), resamples=500, seed=0)
    assert head["greedy"]["value"] == 0.5 and head["greedy"]["n"] == 4
    assert head["greedy"]["raw_reward"]["value"] == 0.0
    assert head["base"]["n"] == 3 and head["base"]["faults"] == 1
    assert head["base"]["fault_reasons"] == {"browser_crash": 1}
    assert head["base"]["choice_differs_from_greedy"] == 1.0
    assert head["base"]["predicted_change_share"] == 0.0
    assert head["base"]["executed_prediction_f1"] == 0.5
    assert head["rlvr"]["n"] == 0 and head["rlvr"]["value"] is None
    assert head["rlvr"]["fault_reasons"] == {"model_unavailable": 4}
    d = head["base_minus_greedy"]
    assert d["n"] == 3 and d["value"] == pytest.approx((0 + 1 + 0) / 3)
    assert head["rlvr_minus_base"]["n"] == 0 and head["rlvr_minus_base"]["ci95"] is None
    summary = {
        "headline": head,
        "planners": ["greedy", "base", "rlvr"],
        "tasks": ["t"],
        "seeds_per_task": 4,
        "value_function": "rules",
    }
    report = web_mpc_report(summary, rows)
    assert "| t | 2/4 | 3/3 | n/a |" in report and "browser_crash" in report


def config(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task": "web_mpc",
        "models": {"base": "b", "rlvr": "r"},
        "tasks": {"names": ["click-button"]},
        "run": {"run_dir": "out"},
    }
    for k, v in kw.items():
        base[k] = base.get(k, {}) | v if isinstance(v, dict) else v
    return base


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"run": {"run_dir": "o", "planners": ["greedy", "oracle"]}}, "expected a subset"),
        ({"run": {"run_dir": "o", "planners": []}}, "expected a subset"),
        ({"tasks": {"names": ["a", "a"]}}, "names must be unique"),
        ({"tasks": {"names": []}}, "at least 1 item"),
        ({"planner": {"candidates": 0}}, "greater than or equal to 1"),
        ({"models": {"base": "b", "rlvr": "r", "temperature": 1.0}}, "Extra inputs"),
    ],
)
def test_bad_configs_are_refused_naming_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        WebMpcConfig.model_validate(config(**change))


def test_unknown_task_names_are_refused_before_any_browser_or_model(tmp_path: Path) -> None:
    from rlvr_world.apps.mpc.web import run_web_mpc

    (tmp_path / "miniwob").mkdir()
    (tmp_path / "miniwob" / "click-button.html").write_text("<html></html>")
    cfg = WebMpcConfig.model_validate(
        config(
            tasks={"names": ["click-button", "no-such-task"], "html_root": str(tmp_path)},
            run={"run_dir": str(tmp_path / "out")},
            models={"base": str(tmp_path / "missing"), "rlvr": str(tmp_path / "missing")},
        )
    )
    with pytest.raises(ValueError, match=r"unknown MiniWoB\+\+ tasks \['no-such-task'\]"):
        run_web_mpc(cfg, "cfg.yaml")
    assert not (tmp_path / "out" / "episodes.jsonl").exists()
