"""The decision-ceiling diagnostic: the threshold sweep (pure) and one real sampling pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr_world.apps.pipeline.ceiling import ItemDecision, main, measure, sweep
from rlvr_world.items import text_game_item
from rlvr_world.tasks.text_game.kitchen import enumerate_transitions
from rlvr_world.tiny_model import TinyLMConfig, build_tiny_lm

ITEMS = [
    # an unchanged item the model often calls unchanged: "no change" is right
    ItemDecision(changed=False, p_nc=0.75, no_change_exact=True, attempt_exact=False),
    # a changed item whose best attempt is exact, but the model leans to "no change"
    ItemDecision(changed=True, p_nc=0.5, no_change_exact=False, attempt_exact=True),
    # a changed item the model cannot get right either way
    ItemDecision(changed=True, p_nc=0.25, no_change_exact=False, attempt_exact=False),
    # an unchanged item the model leans to change
    ItemDecision(changed=False, p_nc=0.25, no_change_exact=True, attempt_exact=False),
]


def test_sweep_ends_are_always_no_change_and_always_attempt() -> None:
    rows = sweep(ITEMS, [0.0, 1.01])
    assert (rows[0].exact, rows[0].no_change_share) == (0.5, 1.0)  # both unchanged right
    assert (rows[1].exact, rows[1].no_change_share) == (0.25, 0.0)  # only the exact attempt


def test_sweep_finds_the_threshold_that_separates_the_items() -> None:
    rows = {r.threshold: r for r in sweep(ITEMS, [0.25, 0.5, 0.75])}
    assert rows[0.25].exact == 0.5  # every item "no change": the attempt of item 2 is lost
    assert rows[0.75].exact == 0.5  # items 1 (nc) and 2 (attempt)
    assert rows[0.5].exact == 0.25  # item 2 answered "no change" at p_nc = 0.5 >= t


def test_sweep_of_no_items_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one item"):
        sweep([], [0.5])


def test_measure_samples_a_real_model(tmp_path: Path) -> None:
    import torch

    torch.set_num_threads(1)
    items = [text_game_item(t, str(i)) for i, t in enumerate(enumerate_transitions(1)[:4])]
    corpus = [i.prompt for i in items] + [i.target for i in items]
    cfg = TinyLMConfig(vocab_size=400, hidden_size=32, num_layers=1, num_heads=2)
    model = build_tiny_lm(tmp_path / "m", corpus, cfg)
    decisions = measure(model, items, samples=3, seed=0, max_tokens=160, variant="strict")
    assert len(decisions) == len(items)
    for item, d in zip(items, decisions, strict=True):
        assert d.p_nc in (0.0, 1 / 3, 2 / 3, 1.0)
        assert d.changed == bool(item.changed)
        assert d.no_change_exact == (not item.changed)  # the real scorer on the empty diff
        assert d.attempt_exact is False  # an untrained model does not write an exact diff


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["configs/pipeline/kitchen_tiny.yaml", "configs", "--samples", "0"], "at least 1"),
        (["configs/pipeline/kitchen_tiny.yaml", "no/such/model"], "not a model directory"),
        (["configs/pipeline/web_smoke.yaml", "configs"], "for text-game runs (task: web)"),
    ],
)
def test_cli_refuses_bad_input_with_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
