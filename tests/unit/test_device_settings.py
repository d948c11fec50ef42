"""One device setting, one meaning (``rlvr_world.devices``): the spellings every config takes and
refuses, resolution to a concrete device, the clear error for a CUDA device the machine lacks,
the precision table, and the flags a run hands each service process."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import BaseModel, ValidationError

from rlvr_world.apps.mpc.config import load_mpc_config
from rlvr_world.apps.mpc.web_config import load_web_mpc_config
from rlvr_world.apps.pipeline.config import PipelineConfig, load_pipeline_config
from rlvr_world.apps.pipeline.runner import PipelineRun
from rlvr_world.apps.run.stack import (
    RolloutSection,
    check_rollout_engine,
    decoder_spec,
    default_vllm_python,
    reward_spec,
    rollout_spec,
)
from rlvr_world.apps.video.config import load_video_config, placed
from rlvr_world.devices import (
    DeviceUnavailable,
    Placement,
    autocast,
    check_device,
    device_line,
    read_device_line,
    resolve_device,
    resolve_precision,
)
from services.decoder.settings import DecoderSettings
from services.rollout.settings import RolloutSettings
from services.rollout.vllm_engine import platform_device
from trainer.config import load_config
from trainer.sft import SftConfig

REPO = Path(__file__).resolve().parents[2]
VIDEO_SMOKE = REPO / "configs" / "video" / "smoke.yaml"
TRAINER_TINY = REPO / "configs" / "trainer" / "tiny_cpu.yaml"
SPELLING = "expected auto, cpu, cuda or cuda:N"
NO_CUDA = pytest.mark.skipif(
    torch.cuda.is_available(), reason="this machine has CUDA: the no-CUDA refusal cannot happen"
)


@pytest.mark.parametrize("name", ["auto", "cpu", "cuda", "cuda:0", "cuda:7", "cuda:123"])
def test_device_spellings_taken(name: str) -> None:
    assert check_device(name) == name


@pytest.mark.parametrize("name", ["cuda:x", "tpu", "CPU", "cuda:", "cuda:01", "rocm", "", "mps"])
def test_device_spellings_refused(name: str) -> None:
    with pytest.raises(ValueError, match=SPELLING):
        check_device(name)


def _bad(load: Any) -> str:
    with pytest.raises(ValidationError) as err:
        load()
    return str(err.value)


@pytest.mark.parametrize("bad", ["cuda:x", "tpu"])
def test_every_config_with_a_device_refuses_a_bad_one_at_load(bad: str) -> None:
    """The pipeline, video, MPC, web MPC, trainer, SFT, rollout and decoder settings: one type,
    one message naming the field."""
    pipe = REPO / "configs" / "pipeline" / "smoke.yaml"
    errors = {
        "pipeline": _bad(lambda: load_pipeline_config(pipe, {"run.device": bad})),
        "video": _bad(lambda: load_video_config(VIDEO_SMOKE, {"run.device": bad})),
        "mpc": _bad(
            lambda: load_mpc_config(
                REPO / "configs" / "mpc" / "smoke_pusht.yaml", {"models.device": bad}
            )
        ),
        "web_mpc": _bad(
            lambda: load_web_mpc_config(
                REPO / "configs" / "mpc" / "smoke_web_miniwob.yaml", {"models.device": bad}
            )
        ),
        "trainer": _bad(lambda: load_config(TRAINER_TINY, [f"run.device={bad}"])),
        "sft": _bad(lambda: SftConfig(device=bad)),
        "rollout": _bad(lambda: RolloutSettings(model="m", device=bad)),
        "decoder": _bad(lambda: DecoderSettings(tokenizer="t", device=bad)),
    }
    for where, message in errors.items():
        assert SPELLING in message and "device" in message, (where, message)


def test_precision_is_refused_unless_auto_fp32_or_bf16() -> None:
    pipe = REPO / "configs" / "pipeline" / "smoke.yaml"
    assert "'auto', 'fp32' or 'bf16'" in _bad(
        lambda: load_pipeline_config(pipe, {"run.precision": "fp16"})
    )
    with pytest.raises(ValueError, match="precision 'half': expected one of auto, fp32, bf16"):
        resolve_precision("half", "cpu")


def test_every_new_field_has_a_description() -> None:
    for model in (PipelineConfig,):
        run = model.model_fields["run"].annotation
        assert isinstance(run, type) and issubclass(run, BaseModel)
        for name in ("device", "precision"):
            assert run.model_fields[name].description


def test_auto_and_cpu_resolve_here_and_cuda_names_the_first_gpu() -> None:
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda:0" if torch.cuda.is_available() else "cpu")


def test_a_gpu_index_past_the_last_one_is_refused_with_what_exists() -> None:
    with pytest.raises(DeviceUnavailable) as err:
        resolve_device("cuda:99", "run.device")
    message = str(err.value)
    assert message.startswith("run.device cuda:99: ")
    if torch.cuda.is_available():
        assert "this machine has" in message
    else:
        assert "sees no CUDA device" in message or "built without CUDA" in message


@NO_CUDA
def test_cuda_without_cuda_is_refused_with_what_to_set() -> None:
    with pytest.raises(DeviceUnavailable) as err:
        resolve_device("cuda", "run.device")
    assert str(err.value).endswith(
        "set run.device to cpu (or auto: CUDA where there is a GPU, else the CPU)"
    )
    assert isinstance(err.value, ValueError)  # config-style callers catch ValueError


@NO_CUDA
def test_a_text_run_on_cuda_without_cuda_stops_before_any_work(tmp_path: Path) -> None:
    cfg = load_pipeline_config(
        REPO / "configs" / "pipeline" / "smoke.yaml",
        {"run.run_dir": str(tmp_path / "run"), "run.device": "cuda"},
    )
    with pytest.raises(DeviceUnavailable, match=r"run\.device cuda: "):
        PipelineRun(cfg)
    assert not (tmp_path / "run").exists()  # no items, no model, no log


@NO_CUDA
def test_a_video_run_on_cuda_without_cuda_is_refused_when_resolved() -> None:
    cfg = load_video_config(REPO / "configs" / "video" / "smoke.yaml", {"run.device": "cuda:0"})
    with pytest.raises(DeviceUnavailable, match=r"run\.device cuda:0: "):
        placed(cfg)


@NO_CUDA
def test_the_cli_says_so_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rlvr_world.apps.cli import main

    run_dir = tmp_path / "run"
    code = main(
        [
            "run",
            str(REPO / "configs" / "pipeline" / "smoke.yaml"),
            "--set",
            f"run.run_dir={run_dir}",
            "--set",
            "run.device=cuda",
        ]
    )
    assert code == 2
    assert "rlvr-world run: error: run.device cuda: " in capsys.readouterr().err
    assert not run_dir.exists()


def test_video_placement_makes_the_device_concrete() -> None:
    cfg = load_video_config(REPO / "configs" / "video" / "smoke.yaml", {"run.device": "auto"})
    resolved, placement = placed(cfg)
    assert resolved.run.device == placement.device == resolve_device("auto")
    assert cfg.run.device == "auto"  # the loaded config is not changed


def test_precision_table() -> None:
    assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision("fp32", "cpu") == "fp32"
    assert resolve_precision("bf16", "cpu") == "bf16"  # honoured on the CPU when asked
    if torch.cuda.is_available():
        bf16 = torch.cuda.is_bf16_supported()
        assert resolve_precision("auto", "cuda:0") == ("bf16" if bf16 else "fp32")
    assert Placement.resolve("cpu", "bf16") == Placement("cpu", "bf16")


def test_autocast_runs_bf16_on_the_cpu_when_asked_and_fp32_otherwise() -> None:
    layer = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    with autocast("cpu", "bf16"):
        assert layer(x).dtype == torch.bfloat16
    with autocast(torch.device("cpu"), "fp32"):
        assert layer(x).dtype == torch.float32
    with pytest.raises(ValueError, match="resolve it first"):
        autocast("cpu", "auto")


def test_the_device_line_reads_back_and_the_last_one_wins() -> None:
    log = "\n".join(
        ["noise", device_line("cpu", "fp32"), "more noise", device_line("cuda:1", "bf16")]
    )
    assert read_device_line(log) == ("cuda:1", "bf16")
    assert read_device_line("no such line") is None


def test_a_run_hands_every_service_its_device_and_the_rollout_its_precision() -> None:
    placement = Placement("cpu", "bf16")
    rollout = rollout_spec(Path("m"), None, 8, placement=placement).argv
    assert rollout[rollout.index("--device") + 1] == "cpu"
    assert rollout[rollout.index("--dtype") + 1] == "bfloat16"
    fp32 = rollout_spec(Path("m"), None, 8, placement=Placement("cpu", "fp32")).argv
    assert fp32[fp32.index("--dtype") + 1] == "float32"
    decoder = decoder_spec(Path("t"), None, "cuda:1").argv
    assert decoder[decoder.index("--device") + 1] == "cuda:1"
    reward = reward_spec(1, "cpu").argv
    assert reward[reward.index("--perceptual-device") + 1] == "cpu"
    # no placement: the services' own default (auto), never a fixed cpu
    assert "--device" not in rollout_spec(Path("m"), None, 8).argv
    assert "--perceptual-device" not in reward_spec(1).argv


def test_vllm_runs_from_this_python_when_vllm_is_installed_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interpreter order: rollout.python, $RLVR_VLLM_PYTHON, this Python where vLLM is
    installed (a package named vllm on the path), else .venv-vllm."""
    monkeypatch.delenv("RLVR_VLLM_PYTHON", raising=False)
    here = default_vllm_python()
    if here != Path(sys.executable):  # no vLLM in this environment: the CPU build's venv
        assert here.parts[-3:] == (".venv-vllm", "bin", "python")
        (tmp_path / "vllm").mkdir()
        (tmp_path / "vllm" / "__init__.py").write_text("")
        monkeypatch.syspath_prepend(str(tmp_path))
        assert default_vllm_python() == Path(sys.executable)
    monkeypatch.setenv("RLVR_VLLM_PYTHON", "/opt/vllm/bin/python")
    assert default_vllm_python() == Path("/opt/vllm/bin/python")
    given = RolloutSection(engine="vllm", python=tmp_path / "py")
    assert given.interpreter == tmp_path / "py"


def test_no_vllm_anywhere_says_both_ways_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlvr_world.apps.run import stack

    monkeypatch.delenv("RLVR_VLLM_PYTHON", raising=False)
    monkeypatch.setattr(stack, "CODE_ROOT", tmp_path)  # a checkout without .venv-vllm
    if stack.vllm_here():
        pytest.skip("vLLM is installed in this environment: the refusal cannot happen")
    with pytest.raises(ValueError) as err:
        check_rollout_engine(RolloutSection(engine="vllm"))
    message = str(err.value)
    assert "vLLM is installed neither in this environment" in message
    assert "pip install -e '.[vllm]'" in message and "make vllm-setup" in message


def test_vllm_device_must_match_its_build() -> None:
    assert platform_device("auto", on_cpu=True) == "cpu"
    assert platform_device("auto", on_cpu=False) == "cuda:0"
    assert platform_device("cuda:2", on_cpu=False) == "cuda:2"
    with pytest.raises(RuntimeError, match="device cuda, but this vLLM is the CPU build"):
        platform_device("cuda", on_cpu=True)
    with pytest.raises(RuntimeError, match="device cpu, but this vLLM is a CUDA build"):
        platform_device("cpu", on_cpu=False)


@pytest.mark.parametrize(
    ("config", "setting", "said"),
    [
        ("pipeline/smoke.yaml", "run.precision=fp8", "run.precision: Input should be 'auto'"),
        ("pipeline/smoke.yaml", "rl.nosuch=1", "rl.nosuch: Extra inputs are not permitted"),
        ("video/smoke.yaml", "rl.steps=-3", "rl.steps: Input should be greater than or equal"),
        ("pipeline/nosuch.yaml", "run.seed=1", "No such file or directory"),
        ("pipeline/smoke.yaml", "norun", "override 'norun' must look like section.field"),
    ],
)
def test_a_bad_config_gets_exit_2_and_the_field_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, setting: str, said: str
) -> None:
    from rlvr_world.apps.cli import main

    run_dir = tmp_path / "run"
    args = ["run", str(REPO / "configs" / config), "--set", setting]
    code = main([*args, "--set", f"run.run_dir={run_dir}"])
    err = capsys.readouterr().err
    assert code == 2 and f"rlvr-world run: error: {REPO / 'configs' / config}: " in err, err
    assert said in err and "Traceback" not in err
    assert not run_dir.exists()
