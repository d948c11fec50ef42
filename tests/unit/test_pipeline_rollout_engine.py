"""``rollout.engine`` of a pipeline run: what the user gets for each bad input, and the command
line every rollout service is started with (``apps.run.stack``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from rlvr_world.apps.pipeline.config import load_pipeline_config
from rlvr_world.apps.pipeline.runner import PipelineRun
from rlvr_world.apps.run.stack import (
    CODE_ROOT,
    RolloutSection,
    check_rollout_engine,
    default_vllm_python,
    rollout_spec,
)

REPO = Path(__file__).resolve().parents[2]
SMOKE_VLLM = REPO / "configs" / "pipeline" / "smoke_vllm.yaml"


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_an_unknown_engine_is_refused_at_load_naming_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"rollout\.engine[\s\S]*'transformers' or 'vllm'"):
        load_pipeline_config(_config(tmp_path, "rollout: {engine: sglang}\n"))


def test_a_tiny_model_vllm_cannot_attend_over_is_refused_at_load(tmp_path: Path) -> None:
    text = "model: {tiny: {hidden_size: 32, num_heads: 2}}\nrollout: {engine: vllm}\n"
    with pytest.raises(ValueError) as err:
        load_pipeline_config(_config(tmp_path, text))
    message = str(err.value)
    assert "rollout.engine vllm: model.tiny: head size 16 (hidden 32 / 2 heads)" in message
    assert "32, 64, 80" in message
    # the same shape with the transformers engine is fine, and so is head size 32 with vLLM
    load_pipeline_config(_config(tmp_path, "model: {tiny: {hidden_size: 32, num_heads: 2}}\n"))
    ok = "model: {tiny: {hidden_size: 64, num_heads: 2}}\nrollout: {engine: vllm}\n"
    assert load_pipeline_config(_config(tmp_path, ok)).rollout.engine == "vllm"


def test_a_missing_vllm_interpreter_is_refused_before_any_work(tmp_path: Path) -> None:
    missing = tmp_path / "no-env" / "bin" / "python"
    cfg = load_pipeline_config(
        SMOKE_VLLM, {"run.run_dir": str(tmp_path / "run"), "rollout.python": str(missing)}
    )
    with pytest.raises(ValueError) as err:
        PipelineRun(cfg).run_async().send(None)
    assert str(err.value) == (
        f"rollout.engine vllm: no interpreter at {missing} (rollout.python): point it at the "
        "Python of an environment that has vLLM"
    )
    assert not (tmp_path / "run" / "data").exists()  # no items, no model, no SFT


def test_a_model_directory_vllm_cannot_attend_over_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"hidden_size": 96, "num_attention_heads": 4}))
    vllm = RolloutSection(engine="vllm", python=Path(sys.executable))
    with pytest.raises(ValueError) as err:
        check_rollout_engine(vllm, model)
    assert str(err.value).startswith(
        f"rollout.engine vllm: model {model}: head size 24 (hidden 96 / 4 heads) is not one "
        "vLLM's CPU attention takes (32, 64, 80"
    )
    (model / "config.json").write_text(
        json.dumps({"hidden_size": 96, "num_attention_heads": 3, "head_dim": 32})
    )
    check_rollout_engine(vllm, model)  # head_dim wins over hidden / heads
    (model / "config.json").write_text(
        json.dumps({"hidden_size": 128, "num_attention_heads": 4, "head_dim": 16})
    )
    with pytest.raises(ValueError, match=r"head size 16 \(head_dim 16\) is not one"):
        check_rollout_engine(vllm, model)
    check_rollout_engine(RolloutSection(), model)  # transformers takes any shape


def test_the_vllm_interpreter_defaults_to_the_env_variable_then_the_checkout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RLVR_VLLM_PYTHON", raising=False)
    assert default_vllm_python() == CODE_ROOT / ".venv-vllm" / "bin" / "python"
    monkeypatch.setenv("RLVR_VLLM_PYTHON", "/opt/vllm/bin/python")
    assert RolloutSection(engine="vllm").interpreter == Path("/opt/vllm/bin/python")
    assert RolloutSection().interpreter == Path(sys.executable)


def test_a_vllm_rollout_runs_from_its_interpreter_with_this_code_on_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    python = tmp_path / "python"
    engine = RolloutSection(engine="vllm", python=python, kv_cache_gib=0.125)
    spec = rollout_spec(tmp_path / "m", "redis://x", 24, tmp_path, name="r", engine=engine)
    assert spec.argv[:3] == [str(python), "-m", "services.rollout"]
    assert spec.argv[spec.argv.index("--engine") + 1] == "vllm"
    assert spec.argv[spec.argv.index("--kv-cache-gib") + 1] == "0.125"
    assert spec.env["PYTHONPATH"] == f"{CODE_ROOT}:/elsewhere"
    assert (CODE_ROOT / "services" / "rollout" / "vllm_engine.py").exists()
    assert spec.env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    plain = rollout_spec(tmp_path / "m", None, 24, name="r")
    assert plain.argv[0] == sys.executable and "--engine" not in plain.argv
    assert "PYTHONPATH" not in plain.env


def test_a_video_run_refuses_vllm_saying_why(tmp_path: Path) -> None:
    from rlvr_world.apps.video.config import load_video_config

    path = _config(tmp_path, "task: video\nrollout: {engine: vllm}\n")
    with pytest.raises(ValueError, match=r"rollout\.engine vllm: not for video runs: vLLM reports"):
        load_video_config(path)
    assert load_video_config(_config(tmp_path, "task: video\n")).rollout.engine == "transformers"


def test_the_model_backend_reaches_the_rollout_command_line_and_the_trainer(
    tmp_path: Path,
) -> None:
    """``auto`` (the default) passes nothing: the service and the trainer pick the torch-only
    Llama where it serves the model; ``transformers`` asks both for transformers' classes; another
    value is refused at load naming the two."""
    auto = rollout_spec(tmp_path / "m", None, 24, name="r")
    assert "--model-backend" not in auto.argv
    spec = rollout_spec(tmp_path / "m", None, 24, name="r", backend="transformers")
    assert spec.argv[spec.argv.index("--model-backend") + 1] == "transformers"
    with pytest.raises(ValueError, match=r"model\.backend[\s\S]*'auto' or 'transformers'"):
        load_pipeline_config(_config(tmp_path, "model: {backend: onnx}\n"))
    cfg = load_pipeline_config(
        _config(tmp_path, f"model: {{backend: transformers}}\nrun: {{run_dir: {tmp_path}}}\n")
    )
    run = PipelineRun(cfg)
    written = yaml.safe_load(run._write_trainer_yaml(tmp_path / "m", "redis://x").read_text())
    assert written["model"] == {
        "path": str(tmp_path / "m"),
        "temperature": 1.0,
        "backend": "transformers",
    }
