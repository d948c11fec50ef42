"""``rlvr-world pool`` over video runs: one headline over runs of one video config with other
``run.seed``, from the files ``rlvr-world run`` writes for a video run (``config.json``,
``summary.json``, ``eval/mle/eval.json`` with the copy baseline, ``seed<n>/eval/{rlvr,
mle_continued}/eval.json`` per RL seed); and what each run set that cannot be pooled gets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from rlvr_world.apps.cli import main
from rlvr_world.apps.commands import pool_any as pool_runs
from rlvr_world.stats import PoolError, paired_bootstrap

CLIPS = 8
KEYS = ("reward", "stlpips", "l1", "mse", "psnr", "ssim")
DATA = {"episodes": 576, "steps": 80, "held_out": 16, "frame_skip": 4}


def _clips(base: float, shift: float, salt: int) -> dict[str, list[float]]:
    """Per-clip scores of every metric: ``base + shift`` plus a fixed per-clip pattern."""
    rng = np.random.default_rng(salt)
    noise = rng.normal(0, 0.002, CLIPS)
    reward = base + shift + noise
    return {k: list(reward * (i + 1)) for i, k in enumerate(KEYS)}


def _run(
    root: Path, seed: int, start: float, control: list[float], rlvr: list[float], **spoil: object
) -> Path:
    """A finished video run: ``control`` and ``rlvr`` hold one shift per RL seed."""
    run = root / f"video_s{seed}"
    run.mkdir(parents=True)
    rl_seeds = [seed + i for i in range(len(control))]
    config = {"task": "video", "data": spoil.get("data", DATA), "eval": {"clips": CLIPS}}
    (run / "config.json").write_text(json.dumps(config | {"run": {"seed": seed, "seeds": 3}}))
    head = {"metric": spoil.get("metric", "reward -(L1 + stlpips)"), "seeds": rl_seeds}
    summary = {"perceptual": {"metric": "stlpips", "net": "vgg"}, "headline": head}
    (run / "summary.json").write_text(json.dumps(summary))
    report = {"per_clip": _clips(-0.05, start, seed), "per_clip_copy": _clips(-0.06, 0.0, 99)}
    (run / "eval" / "mle").mkdir(parents=True)
    (run / "eval" / "mle" / "eval.json").write_text(json.dumps(report))
    for rl_seed, c, r in zip(rl_seeds, control, rlvr, strict=True):
        for folder, shift in (("mle_continued", c), ("rlvr", r)):
            path = run / f"seed{rl_seed}" / "eval" / folder
            path.mkdir(parents=True)
            scores = _clips(-0.05, shift, seed)
            (path / "eval.json").write_text(json.dumps({"per_clip": scores}))
    return run


def test_each_run_is_averaged_over_its_rl_seeds_then_the_runs(tmp_path: Path) -> None:
    a = _run(tmp_path, 0, 0.001, [0.000, 0.002, 0.001], [0.003, 0.004, 0.005])
    # two RL seeds only: still weighs as much as the run with three
    b = _run(tmp_path, 1, -0.002, [-0.001, -0.003], [0.002, 0.000])
    pooled = pool_runs([a, b])
    head = pooled["headline"]
    assert pooled["task"] == "video" and head["seeds"] == [0, 1] and head["n"] == CLIPS
    assert head["rl_seeds"] == {"0": [0, 1, 2], "1": [1, 2]}
    control = [
        np.mean([_clips(-0.05, s, k)["reward"] for s in c], 0)
        for k, c in ((0, [0.000, 0.002, 0.001]), (1, [-0.001, -0.003]))
    ]
    rlvr = [
        np.mean([_clips(-0.05, s, k)["reward"] for s in r], 0)
        for k, r in ((0, [0.003, 0.004, 0.005]), (1, [0.002, 0.000]))
    ]
    assert head["control"] == pytest.approx(np.mean(control))
    assert head["rlvr"] == pytest.approx(np.mean(rlvr))
    assert head["ci95"] == pytest.approx(paired_bootstrap(rlvr, control).as_list())
    assert head["copy_last_frame"] == pytest.approx(np.mean(_clips(-0.06, 0.0, 99)["reward"]))
    assert pooled["per_seed"]["1"]["rlvr"] == pytest.approx(np.mean(rlvr[1]))
    # one headline per metric; lower is better for the distances
    terms = pooled["headline_terms"]
    assert set(terms) == set(KEYS[1:])
    assert not terms["l1"]["higher_is_better"] and terms["psnr"]["higher_is_better"]
    assert terms["psnr"]["rlvr"] == pytest.approx(5 * np.mean(rlvr))
    assert "0.0" in pooled["headline_text"] and "95% CI [+0.00" in pooled["headline_text"]


def test_across_seeds_takes_the_runs_as_units(tmp_path: Path) -> None:
    gains = {0: 0.002, 1: 0.004, 2: -0.001}
    runs = [_run(tmp_path, s, 0.0, [0.0] * 3, [g] * 3) for s, g in gains.items()]
    part = pool_runs(runs)["across_seeds"]["all"]
    diff = part["rlvr_minus_control"]
    assert diff["per_seed"] == pytest.approx(list(gains.values()))
    x = np.array(list(gains.values()))
    half = stats.t.ppf(0.975, 2) * x.std(ddof=1) / np.sqrt(3)
    assert diff["ci95"] == pytest.approx([x.mean() - half, x.mean() + half])
    assert not diff["ci95_excludes_zero"]
    copy = np.mean(_clips(-0.06, 0.0, 99)["reward"])
    want = [np.mean(_clips(-0.05, g, s)["reward"]) - copy for s, g in gains.items()]
    assert part["rlvr_minus_copy"]["per_seed"] == pytest.approx(want)
    assert part["n_per_seed"] == [CLIPS] * 3


def _shuffled(run: Path, seeds: list[int], gaps: dict[str, float], salt: int) -> None:
    """Write the run's shuffled-action evaluations: each model's true per-clip reward minus its
    gap (and the agent error plus ten times it)."""
    for name, folders in (
        ("mle", [run]),
        ("mle_continued", [run / f"seed{s}" for s in seeds]),
        ("rlvr", [run / f"seed{s}" for s in seeds]),
    ):
        for folder in folders:
            true = json.loads((folder / "eval" / name / "eval.json").read_text())
            true["per_clip"]["agent_error_px"] = list(np.arange(CLIPS) + 30.0 + salt)
            (folder / "eval" / name / "eval.json").write_text(json.dumps(true))
            shuffled = {
                "reward": [v - gaps[name] for v in true["per_clip"]["reward"]],
                "agent_error_px": [v + 10 * gaps[name] for v in true["per_clip"]["agent_error_px"]],
            }
            out = folder / "eval" / f"{name}_shuffled_actions"
            out.mkdir(parents=True)
            (out / "eval.json").write_text(json.dumps({"per_clip": shuffled}))


def test_the_shuffle_gap_is_pooled_where_every_run_has_it(tmp_path: Path) -> None:
    a = _run(tmp_path, 0, 0.0, [0.0] * 2, [0.001] * 2)
    b = _run(tmp_path, 1, 0.0, [0.0] * 3, [0.002] * 3)
    assert pool_runs([a, b])["action_reading"] is None  # runs without shuffled evaluations
    _shuffled(a, [0, 1], {"mle": 0.001, "mle_continued": 0.002, "rlvr": 0.004}, 0)
    assert pool_runs([a, b])["action_reading"] is None  # one of the two still lacks them
    _shuffled(b, [1, 2, 3], {"mle": 0.003, "mle_continued": 0.002, "rlvr": 0.006}, 1)
    pooled = pool_runs([a, b])
    found = pooled["action_reading"]
    assert pooled["headline"]["action_reading"] == found and found["seeds"] == [0, 1]
    models = found["models"]
    assert models["start"]["reward_shuffle_gap"]["mean"] == pytest.approx(0.002)
    assert models["rlvr"]["reward_shuffle_gap"]["mean"] == pytest.approx(0.005)
    assert models["rlvr"]["agent_error_px_shuffle_gap"]["mean"] == pytest.approx(0.05)
    diff = found["rlvr_minus_control"]["reward_shuffle_gap"]
    assert diff["mean"] == pytest.approx(0.005 - 0.002) and diff["ci95_excludes_zero"]
    assert models["control"]["agent_error_px"]["mean"] == pytest.approx(30.5 + 3.5)


def _remove(run: Path, name: str) -> None:
    (run / name).unlink()


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        ("duplicate_seed", "run.seed 0 is already in the pool"),
        ("other_data", "held-out clips differ"),
        ("other_metric", "metric 'reward -\\(L1 \\+ lpips\\)' differs"),
        ("unfinished", "summary.json has no headline"),
        ("missing_seed_report", "cannot read the rlvr evaluation of RL seed 2"),
        ("short_report", "4 clips where the start has 8"),
        ("language_run", "not a video run"),
        ("no_start", "cannot read the MLE start's evaluation"),
        ("bad_seeds", "seeds that are not integers"),
    ],
)
def test_run_sets_that_cannot_be_pooled_say_why(tmp_path: Path, spoil: str, message: str) -> None:
    first = _run(tmp_path, 0, 0.0, [0.0] * 3, [0.001] * 3)
    second_seed = 0 if spoil == "duplicate_seed" else 1
    kwargs: dict[str, object] = {}
    if spoil == "other_data":
        kwargs["data"] = DATA | {"held_out": 8}
    if spoil == "other_metric":
        kwargs["metric"] = "reward -(L1 + lpips)"
    second = _run(tmp_path / "b", second_seed, 0.0, [0.0] * 3, [0.001] * 3, **kwargs)
    if spoil == "unfinished":
        (second / "summary.json").write_text(json.dumps({"perceptual": {"metric": "stlpips"}}))
    if spoil == "missing_seed_report":
        _remove(second / "seed2" / "eval" / "rlvr", "eval.json")
    if spoil == "short_report":
        path = second / "seed1" / "eval" / "mle_continued" / "eval.json"
        short = {k: v[:4] for k, v in _clips(-0.05, 0.0, 1).items()}
        path.write_text(json.dumps({"per_clip": short}))
    if spoil == "language_run":
        (second / "config.json").write_text(json.dumps({"task": "text_game"}))
    if spoil == "bad_seeds":
        summary = json.loads((second / "summary.json").read_text())
        summary["headline"]["seeds"] = ["one"]
        (second / "summary.json").write_text(json.dumps(summary))
    if spoil == "no_start":
        _remove(second / "eval" / "mle", "eval.json")
    with pytest.raises(PoolError, match=message):
        pool_runs([first, second])


def test_the_command_prints_every_metric_and_the_run_level_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [_run(tmp_path, s, 0.0, [0.0] * 3, [0.001 * (s + 1)] * 3) for s in (0, 1)]
    out = tmp_path / "pooled.json"
    assert main(["pool", *map(str, runs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "seed 1: start -0.04" in printed and ", copy -0.0" in printed
    assert "l1: start" in printed and "(lower is better)" in printed
    assert "control - copy" in printed and "RLVR - copy" in printed
    assert json.loads(out.read_text())["headline"]["seeds"] == [0, 1]
    # a broken run: exit 2 and the reason, nothing written
    (runs[1] / "eval" / "mle" / "eval.json").write_text("{not json")
    out.unlink()
    assert main(["pool", *map(str, runs), "--out", str(out)]) == 2
    assert "cannot read the MLE start's evaluation" in capsys.readouterr().out
    assert not out.exists()


def test_pool_prints_each_models_shuffle_gaps_with_their_intervals() -> None:
    from rlvr_world.apps.commands import _reading_lines

    gap = {"mean": 0.0014, "ci95": [-0.0017, 0.0053]}
    reading = {"models": {"start": {"reward_shuffle_gap": gap}, "rlvr": {"reward": gap}}}
    assert _reading_lines(reading) == [
        "start: shuffle gap (true vs shuffled actions) reward +0.0014 [-0.0017, +0.0053]"
    ]
    assert _reading_lines(None) == []
