"""What a video run leaves for a reader: ``report.md``, ``compare.png`` and ``curves.png``.

* ``compare.png``: one row per held-out clip: the context frames, then each model's sampled next
  frame (MLE, continued MLE, RLVR: same seed), then the true frame;
* ``curves.png``: MLE and continued-MLE training loss against wall time, and the GRPO batch
  reward per trainer step;
* ``report.md``: the phases and their seconds, the tokenizer's held-out reconstruction, the
  IDM's held-out accuracy on true frames, a table of held-out metrics per model with the
  tokenizer ceiling (true frame's own tokens) and the copy-last-frame baseline, and the
  action-reading table (``action_reading_lines``: per model the reward with true and shuffled
  actions and their gap, the agent-position error and its gap, the IDM's reading, each with its
  95% CI; the baselines' values; RLVR - control).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlvr_world.apps.video.config import SamplingChoice, VideoPipelineConfig
from rlvr_world.runlog import read_jsonl

if TYPE_CHECKING:
    from rlvr_world.apps.video.setup import VideoSetup
    from rlvr_world.video.actions import ActionQuantizer
    from rlvr_world.video.data import ClipArrays
    from rlvr_world.video.layout import SingleStepVocab
    from rlvr_world.video.tokenizer import FrameTokenizer

logger = logging.getLogger(__name__)

#: Models in the order they appear in tables and grids.
MODELS = ("mle", "mle_shuffled_actions", "mle_continued", "rlvr")
LABELS = {
    "mle": "MLE",
    "mle_shuffled_actions": "MLE, actions shuffled",
    "mle_continued": "MLE, continued",
    "rlvr": "RLVR",
}
#: Column headers of the grid (a cell is 2x the frame width: short names).
SHORT = {"mle": "MLE", "mle_continued": "MLE cont.", "rlvr": "RLVR"}
#: (key, label, higher is better); the reward's label names the run's perceptual metric.
METRICS = (
    ("reward", "reward -(L1 + {perceptual})", True),
    ("l1", "L1", False),
    ("lpips", "LPIPS", False),
    ("stlpips", "ST-LPIPS", False),
    ("mse", "MSE", False),
    ("psnr", "PSNR (dB)", True),
    ("ssim", "SSIM", True),
    ("repetition_rate", "repetition rate", False),
)
PERCEPTUAL_LABELS = {"lpips": "LPIPS", "stlpips": "ST-LPIPS"}


def predicted_frames(
    weights: Path,
    clips: Sequence[ClipArrays],
    frame_tokenizer: FrameTokenizer,
    *,
    vocab: SingleStepVocab,
    quantizer: ActionQuantizer,
    sampling: SamplingChoice,
    seed: int,
    anchor_dilate: int | None = None,
) -> np.ndarray:
    """Sampled next frames ``(N, H, W, 3)`` of a saved model for ``clips`` (the eval sampler),
    context-anchored as the evaluations render them when ``anchor_dilate`` is set."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr_world.video.anchor import anchor_frames, last_context_tokens
    from rlvr_world.video.evaluate import EvalConfig, sample_frames
    from rlvr_world.video.train_mle import encode_clips
    from rlvr_world.video.world_model import visual_ids

    model = AutoModelForCausalLM.from_pretrained(str(weights), dtype=torch.float32)
    model.eval()  # type: ignore[no-untyped-call]
    seqs = encode_clips(clips, frame_tokenizer, quantizer, vocab)
    prompts = np.array([s.prompt_ids for s in seqs], dtype=np.int64)
    ecfg = EvalConfig(temperature=sampling.temperature, top_k=sampling.top_k, seed=seed)
    per_frame = frame_tokenizer.tokens_per_frame
    tokens = sample_frames(model, prompts, per_frame, visual_ids(vocab), ecfg)
    frames: np.ndarray = frame_tokenizer.decode_tokens(tokens)
    if anchor_dilate is None:
        return frames
    last = np.array([last_context_tokens(p, per_frame, quantizer.dims) for p in prompts])
    raw = np.stack([f[-2] for f, _ in clips])
    anchored: np.ndarray = anchor_frames(
        frames,
        frame_tokenizer.decode_tokens(last),
        raw,
        tokens,
        last,
        grid=frame_tokenizer.grid,
        dilate=anchor_dilate,
    )
    return anchored


def _control_budget(control: dict[str, Any]) -> str:
    """What the control of one seed got (``control.control_budget``)."""
    kind = control.get("kind", "wall_time")
    if kind == "wall_time":
        return f"the same {control.get('budget_s', 0.0):.0f} s"
    what = "steps" if kind == "steps" else f"{control.get('trained_sequences', 0)} sequences"
    return f"{control.get('max_steps', 0)} steps for GRPO's {what} ({kind})"


def write_run_report(
    cfg: VideoPipelineConfig,
    run_dir: Path,
    summary: Mapping[str, Any],
    s: VideoSetup,
    *,
    models: Mapping[str, Path],
    sampling: SamplingChoice,
) -> Path:
    """``report.md`` with ``compare.png`` of the ``models`` (name -> weights), the curves and
    the tokenizer's reconstructions; the frames are sampled as the evaluations sample them."""
    rows = list(s.test_clips[: cfg.eval.grid_rows])
    if cfg.model.layout == "multi_step":  # compare the last predicted frame dS after ctx, d1
        steps = cfg.model.segment_frames
        rows = [(np.stack([f[0], f[1], f[steps]]), a) for f, a in rows]
    seed = cfg.eval.seed + cfg.run.seed
    anchor = cfg.model.anchor_dilate
    preds = {
        name: _predicted(s, path, rows, sampling, seed, anchor_dilate=anchor)
        for name, path in models.items()
    }
    extras = [write_compare(run_dir / "compare.png", rows, preds)]
    curves = write_curves(run_dir)
    if curves is not None:
        extras.append(curves)
    recon = s.tokenizer_dir / "recon.png"
    if recon.is_file():
        extras.append(recon)
    return write_video_report(run_dir, summary, [str(e) for e in extras])


def _predicted(
    s: VideoSetup,
    weights: Path,
    rows: Sequence[ClipArrays],
    sampling: SamplingChoice,
    seed: int,
    *,
    anchor_dilate: int | None = None,
) -> np.ndarray:
    """Sampled frames of the grid rows (the first held-out clips): the next frame (anchored
    where the run anchors), or the last of a multi-step rollout."""
    from rlvr_world.video.layout import MultiStepVocab, SingleStepVocab

    if isinstance(s.vocab, SingleStepVocab):
        return predicted_frames(
            weights,
            rows,
            s.per_frame,
            vocab=s.vocab,
            quantizer=s.quantizer,
            sampling=sampling,
            seed=seed,
            anchor_dilate=anchor_dilate,
        )
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr_world.video.evaluate import EvalConfig
    from rlvr_world.video.multistep import predicted_multistep

    if not isinstance(s.vocab, MultiStepVocab):
        raise ValueError(f"vocab: {type(s.vocab).__name__} is not a layout vocabulary")
    model = AutoModelForCausalLM.from_pretrained(str(weights), dtype=torch.float32)
    ecfg = EvalConfig(temperature=sampling.temperature, top_k=sampling.top_k, seed=seed)
    seqs = s.test_sequences[: len(rows)]
    _, frames = predicted_multistep(model, s.frame_tokenizer, seqs, s.vocab, ecfg)
    return np.asarray(frames[:, -1])


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


def seed_dirs(run_dir: Path) -> list[Path]:
    """The directories of the RLVR / control repeats: ``seed<n>/`` folders, else the run's."""
    found = sorted(p for p in run_dir.glob("seed*") if p.is_dir())
    return found or [run_dir]


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
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    if mle:
        ax1.plot([e["elapsed_s"] for e in mle], [e["loss"] for e in mle], label="MLE")
    offset = mle[-1]["elapsed_s"] if mle else 0.0
    for folder in seed_dirs(run_dir):
        tag = "" if folder == run_dir else f" ({folder.name})"
        cont = read_jsonl(folder / "mle_continued_log.jsonl")
        if cont:
            ax1.plot(
                [offset + e["elapsed_s"] for e in cont],
                [e["loss"] for e in cont],
                label=f"MLE, continued{tag}",
            )
        log = read_jsonl(folder / "trainer" / "train_log.jsonl")
        steps = [e for e in log if e.get("event") == "step"]
        if steps:
            ax2.plot(
                [e["step"] for e in steps],
                [e["reward_mean"] for e in steps],
                marker=".",
                label=f"RLVR{tag}",
            )
    ax1.set_xlabel("training seconds")
    ax1.set_ylabel("next-frame token cross-entropy")
    ax1.set_title("MLE (continued for RLVR's wall time)")
    ax2.set_xlabel("GRPO step")
    ax2.set_ylabel("batch mean reward (the training reward)")
    ax2.set_title("RLVR")
    for ax in (ax1, ax2):
        if ax.get_legend_handles_labels()[0]:  # a run with mle.path and no control has none
            ax.legend()
    fig.tight_layout()
    out = run_dir / "curves.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def metrics_table(evals: Mapping[str, Mapping[str, Any]], perceptual: str = "stlpips") -> list[str]:
    """Markdown rows: one per metric, a column per model, the ceiling and the copy baselines
    (the last frame's tokens, decoded; and its pixels). The best model is in bold, the
    shuffled-actions ablation aside."""
    names = [n for n in MODELS if n in evals]
    first = evals[names[0]]
    head = ["metric", *(LABELS[n] for n in names)]
    head += ["tokenizer ceiling", "copy last frame (tokens)", "copy last frame (pixels)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ranked = [n for n in names if n != "mle_shuffled_actions"]
    for key, label, higher in METRICS:
        if key not in first:
            continue
        values = {n: float(evals[n][key]) for n in names}
        pick = max if higher else min
        best = pick(values[n] for n in ranked) if ranked else None
        cells = [
            f"**{v:.4f}**" if v == best and len(ranked) > 1 and n in ranked else f"{v:.4f}"
            for n, v in values.items()
        ]
        extra = [first.get(f"{p}_{key}") for p in ("recon", "copy", "raw_copy")]
        cells += [f"{float(x):.4f}" if x is not None else "" for x in extra]
        arrow = "higher" if higher else "lower"
        name = label.format(perceptual=PERCEPTUAL_LABELS.get(perceptual, perceptual))
        lines.append(f"| {name} ({arrow} is better) | " + " | ".join(cells) + " |")
    return lines


def headline_lines(summary: Mapping[str, Any]) -> list[str]:
    """Markdown of ``headline`` and ``headline_terms``: means and the interval of RLVR - continued
    MLE (positive is a gain where higher is better, negative where lower is), or nothing when the
    run has no headline."""
    head = summary.get("headline")
    if not head:
        return []
    rows = [head, *summary.get("headline_terms", {}).values()]
    lines = [
        "",
        f"## Headline: RLVR against continued MLE ({head['n']} held-out clips, seeds "
        f"{head['seeds']})",
        "",
        "| metric | MLE start | continued MLE | RLVR | copy last frame "
        "| 95% CI of RLVR - continued MLE |",
        "|---|---|---|---|---|---|",
    ]
    for h in rows:
        arrow = "higher" if h["higher_is_better"] else "lower"
        low, high = h["ci95"]
        lines.append(
            f"| {h['metric']} ({arrow} is better) | {h['start']:.4f} | {h['control']:.4f} | "
            f"{h['rlvr']:.4f} | {h['copy_last_frame']:.4f} | [{low:+.4f}, {high:+.4f}] |"
        )
    return lines


#: Action-reading columns: (key in a model's entry, header, digits).
READING_COLUMNS = (
    ("reward", "reward", 4),
    ("reward_shuffled", "reward, shuffled actions", 4),
    ("reward_shuffle_gap", "shuffle gap (reward)", 4),
    ("agent_error_px", "agent error (px)", 1),
    ("agent_error_px_shuffled", "agent error, shuffled (px)", 1),
    ("agent_error_px_shuffle_gap", "shuffle gap (agent px)", 1),
    ("agent_missing", "agent not found (share)", 3),
    ("idm_mae", "IDM MAE", 1),
    ("idm_acc", "IDM within tolerance", 3),
)
READING_LABELS = {"start": "MLE start", "control": "continued MLE", "rlvr": "RLVR"}


def _cell(entry: Mapping[str, Any] | None, digits: int) -> str:
    if entry is None:
        return ""
    low, high = entry["ci95"]
    return f"{entry['mean']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def action_reading_lines(summary: Mapping[str, Any]) -> list[str]:
    """Markdown of ``action_reading``: one row per model and baseline, then RLVR - control (the
    error terms: lower is better); nothing when the run has none."""
    found = summary.get("action_reading")
    if not found:
        return []
    models = found["models"]
    cols = [c for c in READING_COLUMNS if any(c[0] in m for m in models.values())]
    lines = [
        "",
        f"## Does the model read its actions? ({found['n']} held-out clips, seeds "
        f"{found['seeds']}; 95% CIs over clips)",
        "",
        "Shuffle gap: the reward with true minus shuffled actions, the agent error with shuffled "
        "minus true actions; positive where the prediction follows its action. Agent error: "
        "the segmented agent's distance to the simulator's (arena px; a frame without an agent "
        "counts as the arena diagonal, 724 px: see the share not found). IDM: its reading of the "
        "predicted step against the given action.",
        "",
        "| model | " + " | ".join(h for _, h, _ in cols) + " |",
        "|---" * (len(cols) + 1) + "|",
    ]
    for name, entry in models.items():
        cells = [_cell(entry.get(k), d) for k, _, d in cols]
        lines.append(f"| {READING_LABELS.get(name, name)} | " + " | ".join(cells) + " |")
    for name, values in found.get("baselines", {}).items():
        cells = [f"{values[k]:.{d}f}" if k in values else "" for k, _, d in cols]
        lines.append(f"| {name.replace('_', ' ')} | " + " | ".join(cells) + " |")
    diff = found.get("rlvr_minus_control")
    if diff:
        cells = []
        for key, _, d in cols:
            entry = diff.get(key.removesuffix("_shuffled") if key.endswith("_shuffled") else key)
            mark = "" if entry is None or not entry.get("ci95_excludes_zero") else " *"
            cells.append("" if key.endswith("_shuffled") else _cell(entry, d) + mark)
        lines.append("| RLVR - control (* CI excludes 0) | " + " | ".join(cells) + " |")
    return lines


def idm_lines(summary: Mapping[str, Any]) -> list[str]:
    """The IDM's line: where it comes from and its held-out accuracy on true frames."""
    idm = summary.get("idm")
    if not idm:
        return []
    held = (idm.get("held_out") or {}).get("idm")
    how = "trained here on the train episodes" if idm.get("trained") else "given"
    if held is None:
        return [f"- IDM: `{idm['path']}` ({how}; no held-out report)"]
    mae = ", ".join(f"{v:.1f}" for v in held["mae"])
    return [
        f"- IDM: `{idm['path']}` ({how}); on held-out true frames MAE ({mae}), "
        f"{100 * held['within_tolerance']:.1f}% within tolerance (the ceiling of the idm terms)"
    ]


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
    lines += idm_lines(summary)
    sampling = summary.get("sampling", {})
    if "used" in sampling:
        used, how = sampling["used"], "tuned on validation clips" if "chosen" in sampling else "set"
        lines.append(
            f"- sampling of every evaluation: temperature {used['temperature']:g}, top-k "
            f"{used['top_k']} ({how})"
        )
    controls = summary.get("baseline", {}).get("by_seed", {})
    for seed, rl in summary.get("rl", {}).get("by_seed", {}).items():
        lines.append(
            f"- RLVR seed {seed}: {rl['seconds']:.0f} s, {rl['pushed']} groups pushed, "
            f"{rl['failed']} failed, {rl['samples_per_s']:.2f} samples/s, reward weights "
            f"{rl['weights']}; continued MLE: {_control_budget(controls.get(seed, {}))}"
        )
    lines += headline_lines(summary)
    if evals:
        n = next(iter(evals.values())).get("n_clips", 0)
        multi = summary.get("model", {}).get("layout") == "multi_step"
        what = "multi-step rollouts (true actions inserted)" if multi else "next-frame prediction"
        lines += ["", f"## Held-out {what} ({n} clips, the sampling above)", ""]
        lines += metrics_table(evals, summary.get("perceptual", {}).get("metric", "stlpips"))
    lines += action_reading_lines(summary)
    links = [Path(os.path.relpath(Path(e).resolve(), run_dir.resolve())) for e in extras]
    lines += [""] + [f"![{link.stem}]({link.as_posix()})" for link in links]
    out = run_dir / "report.md"
    out.write_text("\n".join(lines) + "\n")
    return out
