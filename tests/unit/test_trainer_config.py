"""Trainer config: every shipped file parses, overrides apply, bad values fail clearly."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from trainer.config import TrainerConfig, apply_overrides, load_config

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "trainer"


def _shipped() -> list[Path]:
    return sorted(p for p in CONFIG_DIR.iterdir() if p.suffix in (".yaml", ".yml", ".toml"))


def test_config_dir_has_yaml_and_toml() -> None:
    suffixes = {p.suffix for p in _shipped()}
    assert {".yaml", ".toml"} <= suffixes


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: p.name)
def test_every_shipped_config_parses(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.run.total_steps >= 1
    assert (cfg.model.path is None) != (cfg.model.tiny is None)


def test_every_field_has_a_description() -> None:
    def walk(model: type[BaseModel]) -> None:
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description"
            ann = info.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                walk(ann)

    walk(TrainerConfig)


def test_overrides_and_their_errors() -> None:
    cfg = load_config(
        CONFIG_DIR / "tiny_cpu.yaml",
        ["run.total_steps=3", "grpo.kl_type=k3", "grpo.dual_clip=false", "queue.redis_url=null"],
    )
    assert cfg.run.total_steps == 3
    assert cfg.grpo.kl_type == "k3" and cfg.grpo.dual_clip is False
    assert cfg.queue.redis_url is None
    with pytest.raises(ValueError, match=r"section\.key=value"):
        apply_overrides({}, ["nokey"])
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        load_config(CONFIG_DIR / "tiny_cpu.yaml", ["run.total_steps=0"])
    with pytest.raises(ValidationError, match="kl_type must be one of"):
        load_config(CONFIG_DIR / "tiny_cpu.yaml", ["grpo.kl_type=bogus"])
    with pytest.raises(ValidationError, match=r"exactly one of model\.path and model\.tiny"):
        load_config(CONFIG_DIR / "tiny_cpu.yaml", ["model.path=somewhere"])
    with pytest.raises(ValidationError, match="Extra inputs"):
        load_config(CONFIG_DIR / "tiny_cpu.yaml", ["optim.momentum=0.9"])


def test_unknown_suffix_rejected(tmp_path: Path) -> None:
    path = tmp_path / "cfg.json"
    path.write_text("{}")
    with pytest.raises(ValueError, match=r"must end in \.yaml, \.yml or \.toml"):
        load_config(path)
