"""Throughput of the pure reward core, each against a named floor measured in the same run.

* text game: samples/s of ``score_text_game`` (paper and strict, both reward types) on the golden
  inputs, against ``json.loads`` of the same payloads (ground truth + current state + answer), the
  least any scorer of these requests has to do.
* web: samples/s of ``score_web`` (paper and strict) on the golden inputs, against splitting the
  same texts into line sets (the reference parser's floor).
* video: frame pairs/s of L1 + MSE + PSNR + SSIM, and of ST-LPIPS (VGG) batched and per pair, at
  64x64 and 256x320, against one ``np.abs(a - b).mean()`` per pair.

Golden inputs come from ``$RLVR_SHARED_DIR/golden``; without it, the repository's
``examples/score_requests.jsonl`` is used (and said so). Usage: ``python bench/reward_core.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_world.rewards import video
from rlvr_world.rewards.text_game import score_text_game
from rlvr_world.rewards.web import score_web

ROOT = Path(__file__).resolve().parents[1]


def rate(fn: Callable[[], object], items: int, min_seconds: float = 1.0) -> float:
    """Items per second of ``fn`` (which processes ``items`` items), repeated for min_seconds."""
    fn()  # warm-up
    runs, start = 0, time.perf_counter()
    while True:
        fn()
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return runs * items / elapsed


def load_requests() -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    shared = os.environ.get("RLVR_SHARED_DIR")
    if shared and (Path(shared) / "golden").is_dir():
        golden = Path(shared) / "golden"
        text = [json.loads(x) for x in (golden / "golden_text_game.jsonl").open()]
        web = [json.loads(x) for x in (golden / "golden_web.jsonl").open()]
        tg = [
            {
                "solution_str": c["response"],
                "ground_truth": c["ground_truth"],
                "extra": c["extra_info"],
            }
            for c in text
        ]
        wb = [{"solution_str": c["response"], "ground_truth": c["ground_truth"]} for c in web]
        return tg, wb, f"golden files in {golden}"
    rows = [json.loads(x) for x in (ROOT / "examples" / "score_requests.jsonl").open() if x.strip()]
    rows = [r for r in rows if isinstance(r.get("extra_info"), dict)]
    tg = [
        {
            "solution_str": r["solution_str"],
            "ground_truth": r["ground_truth"],
            "extra": r["extra_info"],
        }
        for r in rows
        if r["data_source"] == "llm_simulator"
    ]
    wb = [r for r in rows if r["data_source"] == "web_agent"]
    return tg, wb, "examples/score_requests.jsonl (RLVR_SHARED_DIR unset)"


def bench_text(tg: list[dict[str, Any]], wb: list[dict[str, Any]]) -> None:
    def json_floor() -> None:
        for r in tg:
            json.loads(r["ground_truth"])
            extra = r["extra"]
            json.loads(
                extra["data_state"] if isinstance(extra, dict) else json.loads(extra)["data_state"]
            )
            with contextlib.suppress(json.JSONDecodeError):
                json.loads(r["solution_str"].rsplit("is:", 1)[-1])

    floor = rate(json_floor, len(tg))
    print(f"text game ({len(tg)} requests); baseline json.loads floor: {floor:,.0f}/s")
    for variant in ("paper", "strict"):
        for reward_type in ("binary", "task_specific"):

            def run(v: str = variant, t: str = reward_type) -> None:
                for r in tg:
                    score_text_game(
                        r["solution_str"], r["ground_truth"], r["extra"], variant=v, reward_type=t
                    )

            ours = rate(run, len(tg))
            label = f"{variant:6s} {reward_type:13s}"
            print(f"  {label} {ours:10,.0f}/s  ratio vs json.loads floor {ours / floor:.3f}")

    def split_floor() -> None:
        for r in wb:
            set(r["solution_str"].split("\n"))
            set(r["ground_truth"].split("\n"))

    floor = rate(split_floor, len(wb))
    print(f"web ({len(wb)} requests); baseline line-set floor: {floor:,.0f}/s")
    for variant in ("paper", "strict"):

        def run_web(v: str = variant) -> None:
            for r in wb:
                score_web(r["solution_str"], r["ground_truth"], variant=v)

        ours = rate(run_web, len(wb))
        print(f"  {variant:6s} {ours:10,.0f}/s  ratio vs line-set floor {ours / floor:.3f}")


def bench_video_size(h: int, w: int, stlpips: Any) -> None:
    n = 8
    rng = np.random.default_rng(0)
    target = rng.random((n, h, w, 3))
    pred = np.clip(target + rng.normal(0, 0.05, target.shape), 0, 1)
    floor = rate(lambda: [np.abs(pred[i] - target[i]).mean() for i in range(n)], n)
    print(f"video {h}x{w}; baseline np.abs(a-b).mean() per pair: {floor:,.0f} pairs/s")
    ours = rate(lambda: video.frame_metrics(pred, target, {}), n)
    print(f"  l1+mse+psnr+ssim {ours:10,.1f} pairs/s  ratio vs floor {ours / floor:.4f}")
    if stlpips is None:
        return
    batched = rate(lambda: stlpips(pred, target), n, min_seconds=2.0)
    single = rate(lambda: [stlpips(pred[i : i + 1], target[i : i + 1]) for i in range(n)], n, 2.0)
    print(
        f"  ST-LPIPS vgg batched {batched:8,.1f} pairs/s, per pair {single:8,.1f} pairs/s "
        f"(batched/per-pair {batched / single:.2f}x; vs floor {batched / floor:.5f})"
    )


def bench_video() -> None:
    try:
        from rlvr_world.rewards.perceptual import make_perceptual

        stlpips: Any = make_perceptual("stlpips", "vgg", "cpu")
    except Exception as exc:
        print(f"ST-LPIPS unavailable: {exc}")
        stlpips = None
    for h, w in ((64, 64), (256, 320)):
        bench_video_size(h, w, stlpips)


def main() -> int:
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    tg, wb, source = load_requests()
    print(f"inputs: {source}")
    bench_text(tg, wb)
    bench_video()
    return 0


if __name__ == "__main__":
    sys.exit(main())
