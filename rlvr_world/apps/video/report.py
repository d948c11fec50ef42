"""What a video run leaves for a reader: ``report.md``, ``compare.png`` and ``curves.png``.

* ``compare.png``: one row per held-out clip: the context frames, then each model's sampled next
  frame (MLE, continued MLE, RLVR: same seed), then the true frame;
* ``curves.png``: MLE and continued-MLE training loss against wall time, and the GRPO batch
  reward per trainer step;
* ``report.md``: the phases and their seconds, the tokenizer's held-out reconstruction, and a
  table of held-out metrics per model with the tokenizer ceiling (true frame's own tokens) and
  the copy-last-frame baseline.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlvr_world.apps.video.config import VideoEval
from rlvr_world.runlog import read_jsonl

if TYPE_CHECKING:
    from rlvr_world.video.actions import ActionQuantizer
    from rlvr_world.video.data import ClipArrays
    from rlvr_world.video.layout import SingleStepVocab
    from rlvr_world.video.tokenizer import FrameTokenizer

logger = logging.getLogger(__name__)

#: Models in the order they appear in tables and grids.
MODELS = ("mle", "mle_continued", "rlvr")
LABELS = {"mle": "MLE", "mle_continued": "MLE, continued", "rlvr": "RLVR"}
#: Column headers of the grid (a cell is 2x the frame width: short names).
SHORT = {"mle": "MLE", "mle_continued": "MLE cont.", "rlvr": "RLVR"}
#: (key, label, higher is better)
METRICS = (
    ("reward", "reward -(L1 + ST-LPIPS)", True),
    ("l1", "L1", False),
    ("stlpips", "ST-LPIPS", False),
    ("mse", "MSE", False),
    ("psnr", "PSNR (dB)", True),
    ("ssim", "SSIM", True),
    ("repetition_rate", "repetition rate", False),
)


def predicted_frames(
    weights: Path,
    clips: Sequence[ClipArrays],
    frame_tokenizer: FrameTokenizer,
    *,
    vocab: SingleStepVocab,
    quantizer: ActionQuantizer,
    cfg: VideoEval,
) -> np.ndarray:
    """Sampled next frames ``(N, H, W, 3)`` of a saved model for ``clips`` (the eval sampler)."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr_world.video.evaluate import EvalConfig, sample_frames
    from rlvr_world.video.train_mle import encode_clips
    from rlvr_world.video.world_model import visual_ids

    model = AutoModelForCausalLM.from_pretrained(str(weights), dtype=torch.float32)
    model.eval()  # type: ignore[no-untyped-call]
    seqs = encode_clips(clips, frame_tokenizer, quantizer, vocab)
    prompts = np.array([s.prompt_ids for s in seqs], dtype=np.int64)
    ecfg = EvalConfig(temperature=cfg.temperature, top_k=cfg.top_k, seed=cfg.seed)
    tokens = sample_frames(
        model, prompts, frame_tokenizer.tokens_per_frame, visual_ids(vocab), ecfg
    )
    frames: np.ndarray = frame_tokenizer.decode_tokens(tokens)
    return frames


def write_compare(
    path: Path,
    clips: Sequence[ClipArrays],
    predictions: Mapping[str, np.ndarray],
    scale: int = 2,
    gap: int = 4,
) -> Path:
    """PNG grid: context frames | one column per model | true frame, one row per clip."""
    from PIL import Image, ImageDraw

    from rlvr_world.video.evaluate import to_uint8

    names = [n for n in MODELS if n in predictions]
    n_ctx = clips[0][0].shape[0] - 1
    h, w = clips[0][0].shape[1:3]
    cols = [f"context {i}" for i in range(n_ctx)] + [SHORT[n] for n in names] + ["true"]
    cell_w, cell_h, header = w * scale + gap, h * scale + gap, 16
    canvas = Image.new("RGB", (len(cols) * cell_w + gap, header + len(clips) * cell_h), "white")
    draw = ImageDraw.Draw(canvas)
    for j, label in enumerate(cols):
        draw.text((gap + j * cell_w, 2), label, fill="black")
    for i, (frames, _) in enumerate(clips):
        row = [frames[k] for k in range(n_ctx)]
        row += [to_uint8(predictions[n][i]) for n in names] + [frames[-1]]
        for j, frame in enumerate(row):
            img = Image.fromarray(np.asarray(frame, dtype=np.uint8)).resize((w * scale, h * scale))
            canvas.paste(img, (gap + j * cell_w, header + i * cell_h))
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(path)
    return path


def write_curves(run_dir: Path) -> Path | None:
    """``curves.png``: MLE losses against wall time, GRPO reward per step (None: no matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed (pipeline extra): no curves")
        return None
    mle = read_jsonl(run_dir / "mle_log.jsonl")
    cont = read_jsonl(run_dir / "mle_continued_log.jsonl")
    steps = [
        e for e in read_jsonl(run_dir / "trainer" / "train_log.jsonl") if e.get("event") == "step"
    ]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    if mle:
        ax1.plot([e["elapsed_s"] for e in mle], [e["loss"] for e in mle], label="MLE")
    if cont:
        offset = mle[-1]["elapsed_s"] if mle else 0.0
        ax1.plot(
            [offset + e["elapsed_s"] for e in cont],
            [e["loss"] for e in cont],
            label="MLE, continued (RLVR's wall time)",
        )
    ax1.set_xlabel("training seconds")
    ax1.set_ylabel("next-frame token cross-entropy")
    ax1.set_title("MLE")
    ax1.legend()
    if steps:
        ax2.plot([e["step"] for e in steps], [e["reward_mean"] for e in steps], marker=".")
    ax2.set_xlabel("GRPO step")
    ax2.set_ylabel("batch mean reward -(L1 + ST-LPIPS)")
    ax2.set_title("RLVR")
    fig.tight_layout()
    out = run_dir / "curves.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def metrics_table(evals: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Markdown rows: one per metric, a column per model, the ceiling and the copy baseline."""
    names = [n for n in MODELS if n in evals]
    first = evals[names[0]]
    head = ["metric", *(LABELS[n] for n in names), "tokenizer ceiling", "copy last frame"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, label, higher in METRICS:
        if key not in first:
            continue
        values = [float(evals[n][key]) for n in names]
        best = max(values) if higher else min(values)
        cells = [f"**{v:.4f}**" if v == best and len(values) > 1 else f"{v:.4f}" for v in values]
        extra = [first.get(f"recon_{key}"), first.get(f"copy_{key}")]
        cells += [f"{float(x):.4f}" if x is not None else "" for x in extra]
        arrow = "higher" if higher else "lower"
        lines.append(f"| {label} ({arrow} is better) | " + " | ".join(cells) + " |")
    return lines


def write_video_report(run_dir: Path, summary: Mapping[str, Any], extras: Sequence[str]) -> Path:
    """``report.md`` from the run summary; ``extras`` are image files to link."""
    evals = summary.get("eval", {})
    phases = summary.get("phases_s", {})
    tok = summary.get("tokenizer", {})
    lines = [
        "# RLVR-World video run",
        "",
        f"- config: `{summary.get('config', '')}`",
        f"- wall time: {summary.get('wall_s', 0.0):.0f} s; phases (s): "
        + ", ".join(f"{k} {v:.0f}" for k, v in phases.items()),
    ]
    if tok.get("trained"):
        lines.append(
            f"- tokenizer: held-out PSNR {tok.get('eval_psnr', float('nan')):.2f} dB, "
            f"L1 {tok.get('eval_l1', float('nan')):.4f}"
        )
    rl = summary.get("rl", {})
    if rl:
        lines.append(
            f"- RLVR: {rl['seconds']:.0f} s, {rl['pushed']} groups pushed, {rl['failed']} failed, "
            f"{rl['samples_per_s']:.2f} samples/s; continued MLE got the same "
            f"{summary.get('baseline', {}).get('budget_s', 0.0):.0f} s"
        )
    if evals:
        n = next(iter(evals.values())).get("n_clips", 0)
        multi = summary.get("model", {}).get("layout") == "multi_step"
        what = "multi-step rollouts (true actions inserted)" if multi else "next-frame prediction"
        lines += ["", f"## Held-out {what} ({n} clips, sampled)", ""]
        lines += metrics_table(evals)
    links = [Path(os.path.relpath(Path(e).resolve(), run_dir.resolve())) for e in extras]
    lines += [""] + [f"![{link.stem}]({link.as_posix()})" for link in links]
    out = run_dir / "report.md"
    out.write_text("\n".join(lines) + "\n")
    return out
