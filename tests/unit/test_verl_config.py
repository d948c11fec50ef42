"""configs/verl composes with verl's own ppo_trainer.yaml (Hydra's compose API, nothing runs), with
the overrides of deploy/verl/run_text_game_grpo.sh, and verl loads our reward function from it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "configs" / "verl"
SCRIPT = ROOT / "deploy" / "verl" / "run_text_game_grpo.sh"


def script_overrides() -> list[str]:
    """The Hydra overrides the run script passes, with its default values filled in."""
    text = SCRIPT.read_text()
    found = re.findall(r'^\s+([\w.]+)="\$\{\w+:-([^}]+)\}"', text, re.MULTILINE)
    assert found, "no overrides found in the run script"
    return [f"{key}={value}" for key, value in found]


def compose(monkeypatch: pytest.MonkeyPatch, overrides: list[str]) -> Any:
    pytest.importorskip("verl", reason="verl is in the trainer extra")
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import rlvr_world.adapters.verl as adapter

    monkeypatch.setenv("RLVR_VERL_ADAPTER", str(adapter.__file__))
    monkeypatch.setenv("RLVR_REWARD_ADDRESS", "dns:///reward:50051")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return hydra_compose(config_name="text_game_grpo", overrides=overrides)


@pytest.mark.slow  # imports verl and composes its Hydra tree (~8 s in all)
def test_text_game_config_composes_over_verl_ppo_trainer(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = compose(monkeypatch, [*script_overrides(), "trainer.total_epochs=1"])
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.trainer.nnodes == 2 and cfg.trainer.n_gpus_per_node == 8
    assert cfg.trainer.total_epochs == 1
    assert cfg.actor_rollout_ref.rollout.n > 1  # GRPO needs a group per prompt
    assert cfg.actor_rollout_ref.actor.use_kl_loss is True
    # keys of verl's own file survive (the composition really extends ppo_trainer.yaml)
    assert cfg.actor_rollout_ref.actor.clip_ratio > 0
    assert cfg.reward.reward_manager.name == "naive"


@pytest.mark.slow  # imports verl and composes its Hydra tree (~8 s in all)
def test_unknown_override_is_refused_by_verls_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose(monkeypatch, ["trainer.no_such_field=1"])


@pytest.mark.slow  # imports verl and composes its Hydra tree (~8 s in all)
def test_verl_loads_our_reward_function_with_the_service_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import inspect

    from verl.trainer.ppo.reward import get_custom_reward_fn

    from rlvr_world.adapters.verl import compute_score

    cfg = compose(monkeypatch, script_overrides())
    fn = get_custom_reward_fn(cfg)
    assert fn is not None
    raw, kwargs = fn.args  # type: ignore[attr-defined]
    assert inspect.iscoroutinefunction(raw) and raw.__name__ == compute_score.__name__
    assert raw.__code__.co_filename == compute_score.__code__.co_filename
    assert kwargs["address"] == "dns:///reward:50051"
    assert list(kwargs["metric_keys"]) == ["item_accuracy", "score_accuracy", "exact"]


def test_run_script_has_no_comment_after_a_line_continuation() -> None:
    for number, line in enumerate(SCRIPT.read_text().splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        assert not (code.rstrip().endswith("\\") and "#" in line), f"line {number}: {line}"
