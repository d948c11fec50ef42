"""The work of ``rlvr-world video train-idm``: PushT steps, an IDM trained on them, its ceiling.

* Data: the recordings of a finished video run (``RUN_DIR/data/pusht/ep*.npz``, its
  ``config.json`` (or ``config.yaml``) deciding the frame size, ``frame_skip`` and the action
  form), or a fresh recording (``rlvr_world.video.pusht``). Frames are resized as the run resizes
  them, and each model step is formed by the run's own code (``episodes.skip_steps`` and
  ``episodes.agent_relative``): previous frame, next frame ``frame_skip`` steps later, the span's
  last target (agent_relative: minus the agent's position at its start).
* Split by episode: a run's own test episodes are held out (its train and validation episodes
  train the IDM, so the IDM never saw the clips the run evaluates on); a fresh recording is
  split with ``held_out`` episodes out, seeded by its seed.
* Training pairs: every start offset of a span (a recording of 80 steps at frame_skip 4 gives 77
  spans, not 20), since any window of ``frame_skip`` steps is a model step of the same kind;
  ``every_offset=False`` keeps only the run's own spans. Held-out pairs are the run's spans.
* The report (``report.json``): on the held-out true frames, the IDM's MAE per axis (action
  units: arena pixels), R^2 per axis and share within the tolerance; the same for the mean
  training action (the best constant) and for the IDM reading a copied frame (next = previous:
  what a world model that copies its input would score). That is the ceiling of the ``idm``
  reward: a prediction can score no better than the IDM reads true frames.

What it does not do: no tokenizer round trip (the IDM reads true frames here; a run's decoded
predictions are blurrier), no other source than PushT.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from rlvr_world.apps.video.config import VideoData
from rlvr_world.apps.video.episodes import action_ranges, agent_relative, skip_steps

if TYPE_CHECKING:
    from pydantic import ValidationError

    from rlvr_world.video.data import Episode

logger = logging.getLogger(__name__)

REPORT_FILE = "report.json"
#: The files a run writes with its resolved config, in the order they are looked for.
RUN_CONFIG_FILES = ("config.json", "config.yaml")


@dataclass(frozen=True)
class Recording:
    """One recorded PushT episode, frames already at the run's size."""

    episode: Episode
    agent_pos: npt.NDArray[np.float64]


@dataclass(frozen=True)
class Steps:
    """Model steps: previous and next frames ``(N, H, W, 3)`` uint8 and actions ``(N, D)``."""

    prev: npt.NDArray[np.uint8]
    nxt: npt.NDArray[np.uint8]
    actions: npt.NDArray[np.float32]

    @classmethod
    def concat(cls, parts: list[Steps]) -> Steps:
        return cls(
            np.concatenate([p.prev for p in parts]),
            np.concatenate([p.nxt for p in parts]),
            np.concatenate([p.actions for p in parts]),
        )


@dataclass(frozen=True)
class TrainSettings:
    """The IDM's training: optimiser steps, batch, learning rate, seed, time limit, device."""

    steps: int
    batch_size: int
    lr: float
    seed: int
    device: str
    every_offset: bool = True
    time_limit_s: float | None = None


# --------------------------------------------------------------------------------------------
# Data


def run_data(run_dir: Path) -> tuple[VideoData, list[Path]]:
    """A finished run's ``data`` section and its recordings; ``ValueError`` saying what is
    missing or why the run is not a PushT one."""
    import yaml
    from pydantic import ValidationError

    if not run_dir.is_dir():
        raise ValueError(f"--run-dir {run_dir}: not a folder")
    found = [run_dir / name for name in RUN_CONFIG_FILES if (run_dir / name).is_file()]
    if not found:
        raise ValueError(
            f"--run-dir {run_dir}: no {' or '.join(RUN_CONFIG_FILES)}; is it a video run's folder "
            "(rlvr-world run configs/video/...)?"
        )
    try:
        text = found[0].read_text()
        cfg = json.loads(text) if found[0].suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{found[0]}: cannot be read: {exc}") from exc
    if not isinstance(cfg, dict) or cfg.get("task", "video") != "video":
        task = cfg.get("task") if isinstance(cfg, dict) else type(cfg).__name__
        raise ValueError(f"{found[0]}: a run of task {task!r}; train-idm reads video runs")
    try:
        data = VideoData.model_validate(cfg.get("data") or {})
    except ValidationError as exc:
        raise ValueError(
            f"{found[0]}: its data section does not validate: {validation_errors(exc)}"
        ) from None
    if data.source != "pusht":
        raise ValueError(
            f"{found[0]}: data.source is {data.source!r}; train-idm needs PushT recordings "
            "(source pusht), which carry the agent's position the actions are formed from"
        )
    folder = run_dir / "data" / "pusht"
    paths = sorted(folder.glob("ep*.npz")) if folder.is_dir() else []
    if not paths:
        raise ValueError(f"--run-dir {run_dir}: no recordings in {folder} (ep*.npz)")
    if len(paths) != data.episodes:
        raise ValueError(
            f"--run-dir {run_dir}: {len(paths)} recordings in {folder}, but its config says "
            f"data.episodes = {data.episodes}; the run's split cannot be rebuilt"
        )
    return data, paths


def validation_errors(exc: ValidationError) -> str:
    """A pydantic error as one line: ``field: message; ...``."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'data'}: {e['msg']}" for e in exc.errors())


def read_recordings(paths: list[Path], size: int | tuple[int, int]) -> list[Recording]:
    """The recordings at ``paths`` with their agent positions, frames resized to ``size``."""
    from rlvr_world.video.data import load_pusht, resize_episode

    out = []
    for path in paths:
        episode = load_pusht(path)
        with np.load(path, allow_pickle=False) as npz:
            if "agent_pos" not in npz.files:
                raise ValueError(f"{path}: no agent_pos (has {npz.files}); re-record the run")
            pos = np.asarray(npz["agent_pos"], dtype=np.float64)
        if pos.shape != (episode.length + 1, 2):
            raise ValueError(
                f"{path}: agent_pos of shape {pos.shape}, expected ({episode.length + 1}, 2)"
            )
        out.append(Recording(resize_episode(episode, size), pos))
    return out


def fresh_recordings(data: VideoData) -> list[Recording]:
    """``data.episodes`` new PushT recordings (``data.steps`` steps, ``data.seed``), resized."""
    from rlvr_world.video.data import resize_episode
    from rlvr_world.video.pusht import generate_pusht

    return [
        Recording(resize_episode(r.to_episode(), data.image_size), r.agent_pos)
        for r in generate_pusht(data.episodes, data.steps, data.seed)
    ]


def form_steps(rec: Recording, data: VideoData, offsets: range) -> Steps:
    """The model steps of ``rec`` starting at each of ``offsets`` (module docstring)."""
    from rlvr_world.video.data import Episode

    parts = []
    for s in offsets:
        ep = rec.episode
        if ep.length - s < data.frame_skip:
            continue
        episode = Episode(ep.frames[s:], ep.actions[s:], ep.source)
        pos = rec.agent_pos[s:]
        if data.frame_skip > 1:
            episode, pos = skip_steps(episode, pos, data.frame_skip)
        if data.actions == "agent_relative":
            episode = agent_relative(episode, pos)
        parts.append(Steps(episode.frames[:-1], episode.frames[1:], episode.actions))
    if not parts:
        raise ValueError(
            f"data.frame_skip {data.frame_skip}: longer than the {rec.episode.length} steps of "
            f"{rec.episode.source}"
        )
    return Steps.concat(parts)


def split(
    data: VideoData, recs: list[Recording], from_run: bool
) -> tuple[list[Recording], list[Recording]]:
    """``(train, held_out)`` by episode (module docstring)."""
    from rlvr_world.apps.video.episodes import split_data
    from rlvr_world.video.data import split_episodes

    by_id = {id(r.episode): r for r in recs}
    episodes = [r.episode for r in recs]
    if from_run:
        train, val, test = split_data(data, episodes)
        train = train + val
    else:
        train, test = split_episodes(episodes, data.held_out, seed=data.seed)
    return [by_id[id(e)] for e in train], [by_id[id(e)] for e in test]


# --------------------------------------------------------------------------------------------
# Training and the report


def train_and_report(
    data: VideoData,
    recs: list[Recording],
    settings: TrainSettings,
    out: Path,
    source: dict[str, Any],
) -> dict[str, Any]:
    """Train an IDM on ``recs``, save it to ``out`` with ``report.json``; returns the report."""
    import torch

    from rlvr_world.rewards.action import ActionRewardConfig, action_accuracy
    from rlvr_world.video.idm import IdmConfig, InverseDynamicsModel, fit_idm

    train_recs, held_recs = split(data, recs, from_run=source["kind"] == "run")
    k = data.frame_skip
    offsets = range(k) if settings.every_offset else range(1)
    train = Steps.concat([form_steps(r, data, offsets) for r in train_recs])
    held = Steps.concat([form_steps(r, data, range(1)) for r in held_recs])
    ranges = action_ranges(data)
    assert ranges is not None  # PushT always has them
    size = data.image_size
    config = IdmConfig(
        image_size=(size, size) if isinstance(size, int) else size,
        action_dims=len(ranges),
        action_ranges=tuple((float(lo), float(hi)) for lo, hi in ranges),
        action_form=data.actions,
        frame_skip=k,
    )
    torch.manual_seed(settings.seed)
    model = InverseDynamicsModel(config).to(settings.device)
    logger.info(
        "training the IDM on %d pairs of %d episodes (held out: %d pairs of %d episodes)",
        len(train.actions),
        len(train_recs),
        len(held.actions),
        len(held_recs),
    )
    stats = fit_idm(
        model,
        train.prev,
        train.nxt,
        train.actions,
        steps=settings.steps,
        batch_size=settings.batch_size,
        lr=settings.lr,
        seed=settings.seed,
        time_limit_s=settings.time_limit_s,
    )
    model.save(out)
    reward_cfg: ActionRewardConfig = config.reward_config()
    mean = np.clip(train.actions.mean(axis=0), ranges[:, 0], ranges[:, 1])
    t0 = time.perf_counter()
    read = model.predict(held.prev, held.nxt)
    predict_s = time.perf_counter() - t0
    held_out = {
        "idm": action_accuracy(read, held.actions, reward_cfg).to_dict(),
        "mean_action": action_accuracy(
            np.broadcast_to(mean, held.actions.shape), held.actions, reward_cfg
        ).to_dict(),
        "copy": action_accuracy(
            model.predict(held.prev, held.prev), held.actions, reward_cfg
        ).to_dict(),
    }
    widths = ranges[:, 1] - ranges[:, 0]
    report: dict[str, Any] = {
        "idm": str(out),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "data": {
            **source,
            "episodes": len(recs),
            "steps": int(recs[0].episode.length),
            "image_size": config.image_size,
            "frame_skip": k,
            "actions": data.actions,
            "action_ranges": config.action_ranges,
            "train_episodes": len(train_recs),
            "held_out_episodes": len(held_recs),
            "train_pairs": len(train.actions),
            "held_out_pairs": len(held.actions),
            "every_offset": settings.every_offset,
        },
        "training": {
            "steps": stats.steps,
            "batch_size": settings.batch_size,
            "lr": settings.lr,
            "seed": settings.seed,
            "device": settings.device,
            "threads": torch.get_num_threads(),
            "seconds": round(stats.seconds, 1),
            "final_loss": stats.final_loss,
            "stopped_early": stats.stopped_early,
        },
        "held_out_predict_s": round(predict_s, 2),
        "tolerance": {
            "share_of_range": config.tolerance,
            "action_units": [float(w * config.tolerance) for w in widths],
        },
        "units": "action units (PushT: arena pixels); mae and r2 per axis (x, y)",
        "held_out": held_out,
    }
    (out / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
    return report
