"""Phase 4 of the video run (RLVR): the services, the queue-fed trainer and the orchestrator.

``run_rl`` starts the embedded Redis and, under a ``Supervisor``, the reward service, the decoder
(serving ``DecodeFrames`` with the frame tokenizer) and the rollout service (the MLE model) on
loopback, then the trainer from a generated YAML (it starts from the MLE weights and checkpoints
every step), and feeds the train items through the orchestrator until the trainer exits. What it
derives from the run configuration is computed by plain functions here: the items
(``rl_items``), the trainer's YAML (``write_trainer_yaml``), the orchestrator's settings
(``orchestrator_config``) and the rollout's token limit (``rollout_max_tokens``); the settings
every run type shares and the orchestration call are ``apps.run.grpo``'s.

It does not evaluate, and it writes no summary: ``VideoRun.rl`` records the outcome.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import yaml

from rlvr_world.apps.orchestrator.config import OrchestratorConfig
from rlvr_world.apps.orchestrator.worker import RunStats
from rlvr_world.apps.run.grpo import orchestrator_config as shared_orchestrator_config
from rlvr_world.apps.run.grpo import run_grpo, trainer_config
from rlvr_world.apps.run.stack import process_devices, start_services, trainer_spec
from rlvr_world.apps.supervisor import Supervisor
from rlvr_world.apps.video.config import VideoPipelineConfig
from rlvr_world.apps.video.evaluation import reward_weights
from rlvr_world.devices import Placement
from rlvr_world.items import PromptItem, video_item, video_payload
from rlvr_world.queue.server import start_embedded
from rlvr_world.rewards.types import Status
from rlvr_world.rewards.video import PERCEPTUAL_METRICS
from rlvr_world.runlog import JsonlLog
from rlvr_world.video.anchor import last_context_tokens
from rlvr_world.video.data import ClipArrays
from rlvr_world.video.layout import LayoutVocab, MultiStepVocab, TokenSequence
from rlvr_world.video.world_model import visual_ids

if TYPE_CHECKING:
    from rlvr_world.apps.video.setup import VideoSetup


@dataclass(frozen=True)
class RlOutcome:
    """How the RLVR phase ended."""

    trainer_exit: int
    stats: RunStats
    seconds: float  # from the trainer's start to its exit
    #: The device each process logged (``stack.process_devices``), by process name.
    devices: dict[str, dict[str, str] | None]


#: Per clip, the true actions ``(T, A)`` and states ``(T, 5)`` (or None) of its predicted frames.
ClipTruth = tuple[np.ndarray, np.ndarray | None]


def clip_truth(
    clips: Sequence[ClipArrays], action_rows: slice, states: Sequence[np.ndarray] | None
) -> list[ClipTruth]:
    """Each clip's truth of the action-following terms: the actions of ``action_rows``
    (``setup.predicted_rows``) and its states (``VideoSetup.*_states``; None without them)."""
    if states is not None and len(states) != len(clips):
        raise ValueError(f"states: {len(states)} for {len(clips)} clips")
    return [
        (np.asarray(actions[action_rows], dtype=np.float64), None if states is None else states[i])
        for i, (_, actions) in enumerate(clips)
    ]


def rl_items(
    clips: Sequence[ClipArrays],
    sequences: Sequence[TokenSequence],
    tokens_per_frame: int,
    multi_step: bool,
    *,
    anchor: tuple[tuple[int, int], int] | None = None,
    context_vocab: MultiStepVocab | None = None,
    truth: Sequence[ClipTruth] | None = None,
) -> list[PromptItem]:
    """One prompt item per train clip: the next frame, or the multi-step rollout of the clip.
    ``anchor`` (single-step): ``((rows, cols), action_dims)``, the token grid and the action ids
    per step; each item then carries its last context frame's tokens for context-anchored
    frames (``rlvr_world.video.anchor``). ``context_vocab`` (multi-step, compressive tokenizer):
    each item carries its context frame's tokens, which the decoder conditions on. ``truth``
    (``clip_truth``): each item carries its predicted frames' true actions and states, for the
    ``idm`` and ``state`` reward terms."""
    if multi_step:
        from rlvr_world.video.multistep import context_tokens, multistep_item

        items = [
            multistep_item(
                f"clip{i:05d}",
                seq,
                frames,
                context=() if context_vocab is None else context_tokens(seq, context_vocab),
            )
            for i, ((frames, _), seq) in enumerate(zip(clips, sequences, strict=True))
        ]
    else:
        items = [
            video_item(
                f"clip{i:05d}",
                seq.prompt_ids,
                frames[-1],
                frames[-2],
                target_tokens=seq.response_ids[:tokens_per_frame],
                anchor=None
                if anchor is None
                else (last_context_tokens(seq.prompt_ids, tokens_per_frame, anchor[1]), anchor[0]),
            )
            for i, ((frames, _), seq) in enumerate(zip(clips, sequences, strict=True))
        ]
    if truth is None:
        return items
    if len(truth) != len(items):
        raise ValueError(f"truth: {len(truth)} rows for {len(items)} clips")
    return [
        replace(item, video=replace(video_payload(item), actions=acts, states=states))
        for item, (acts, states) in zip(items, truth, strict=True)
    ]


def write_trainer_yaml(
    cfg: VideoPipelineConfig, model: Path, redis_url: str, run_dir: Path, seed: int = 0
) -> Path:
    """The trainer's YAML (``apps.run.grpo.trainer_config``, writing under ``run_dir/trainer``) in
    ``run_dir/trainer.yaml``; returns the path."""
    placement = Placement.resolve(cfg.run.device, cfg.run.precision)
    data = trainer_config(
        cfg.rl,
        model=model,
        redis_url=redis_url,
        trainer_dir=run_dir / "trainer",
        device=placement.device,
        precision=placement.precision,
        idle_timeout_s=cfg.run.trainer_idle_timeout_s,
        seed=seed,
    )
    path = run_dir / "trainer.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def rollout_max_tokens(cfg: VideoPipelineConfig, tokens_per_frame: int, action_dims: int) -> int:
    """The rollout server's token limit: one frame, or S - 1 frames and their actions."""
    if cfg.model.layout == "multi_step":
        steps = cfg.model.segment_frames - 1
        return steps * (tokens_per_frame + action_dims)
    return tokens_per_frame


#: Sampling seeds of different run seeds lie this far apart (one per request).
SEED_STRIDE = 1_000_003


def orchestrator_config(
    cfg: VideoPipelineConfig,
    tokens_per_frame: int,
    vocab: LayoutVocab,
    *,
    metric: str = "stlpips",
    seed: int = 0,
    weights: dict[str, float] | None = None,
    grid: tuple[int, int] | None = None,
) -> OrchestratorConfig:
    """Sampling restricted to the visual ids, ``tokens_per_frame`` per generated frame, seeded
    by ``seed``; the reward's weights are ``weights``, else ``rl.weights`` with ``perceptual``
    resolved to ``metric``; the perceptual backbone is ``eval.net``. With ``rl.token_credit``
    the reward scores each cell of the frame's token ``grid`` (``ValueError`` without one, or
    when it does not hold ``tokens_per_frame`` tokens)."""
    rl = cfg.rl
    weights = weights if weights is not None else reward_weights(rl, metric)
    perceptual = any(k in PERCEPTUAL_METRICS and w > 0 for k, w in weights.items())
    patch_grid = None
    if rl.token_credit > 0:
        if grid is None or grid[0] * grid[1] != tokens_per_frame:
            raise ValueError(
                f"rl.token_credit: needs the frame's token grid ({tokens_per_frame} tokens per "
                f"frame), got {grid}"
            )
        patch_grid = grid
    return shared_orchestrator_config(
        rl,
        seed=seed * SEED_STRIDE,
        max_tokens=tokens_per_frame,
        allowed_tokens=(0, len(visual_ids(vocab))),
        ignore_eos=True,
        video_weights=weights,
        video_lpips_net=cfg.eval.net if perceptual else "",
        video_repetition_penalty=rl.repetition_penalty,
        video_anchor_dilate=cfg.model.anchor_dilate,
        video_patch_grid=patch_grid,
    )


async def warm_up_reward(
    address: str, orchestrator: OrchestratorConfig, item: PromptItem, deadline_s: float
) -> int:
    """Score a black frame with the run's reward settings and ``item``'s true actions and
    states (the shapes the run sends) until the service answers ``ok`` (its scoring process
    loads the perceptual network on the first video request, which on a busy CPU can outlast
    the per-call deadline); returns the calls it took. ``RuntimeError`` after ``deadline_s``
    or on any status other than ``ok`` and ``timeout``."""
    import asyncio

    from rlvr_world.wire.reward import AsyncRewardClient, frames_request

    payload = video_payload(item)
    target = payload.target if payload.multi_step else payload.target[None]
    frames = np.zeros_like(target)
    request = frames_request(
        frames,
        target,
        payload.previous,
        weights=orchestrator.video_weights,
        lpips_net=orchestrator.video_lpips_net,
        repetition_penalty=orchestrator.video_repetition_penalty,
        actions=payload.actions,
        states=payload.states,
    )
    client = AsyncRewardClient(address, timeout_s=deadline_s)
    start, calls = time.perf_counter(), 0
    try:
        while True:
            calls += 1
            result = await client.score(request)
            if result.status == Status.OK:
                return calls
            if result.status != Status.TIMEOUT:
                raise RuntimeError(f"reward warm-up: {result.status}: {result.message}")
            if time.perf_counter() - start > deadline_s:
                raise RuntimeError(f"reward warm-up: still timing out after {deadline_s:.0f} s")
            await asyncio.sleep(0.5)
    finally:
        await client.close()


def final_checkpoint(trainer_dir: Path) -> Path:
    """The trainer's last checkpoint under ``trainer_dir``; ``RuntimeError`` when there is none."""
    from trainer.checkpoint import latest_checkpoint

    path = latest_checkpoint(trainer_dir)
    if path is None:
        raise RuntimeError(f"the trainer wrote no checkpoint under {trainer_dir}")
    return path


async def run_rl(
    cfg: VideoPipelineConfig,
    run_dir: Path,
    log: JsonlLog,
    *,
    setup: VideoSetup,
    model: Path,
    items: list[PromptItem],
    orchestrator: OrchestratorConfig,
    seed: int = 0,
) -> RlOutcome:
    """Start Redis and the services, train from ``model`` until the trainer exits (module
    docstring); the services' addresses go to ``log``. The decoder serves ``setup``'s frame
    tokenizer; the rollout's token limit is ``rollout_max_tokens`` of its tokens and actions;
    the reward service loads ``setup``'s IDM (its ``idm`` weight)."""
    r = cfg.run
    redis = start_embedded(run_dir / "redis")
    try:
        with Supervisor(run_dir) as sup:
            addrs = start_services(
                sup,
                model=model,
                redis_url=redis.url,
                max_tokens=rollout_max_tokens(cfg, setup.tokens_per_frame, setup.quantizer.dims),
                timeout_s=r.service_start_timeout_s,
                video_tokenizer=setup.tokenizer_dir,
                placement=Placement.resolve(r.device, r.precision),
                idm_path=setup.idm_dir,
            )
            log.write("services", **asdict(addrs))
            calls = await warm_up_reward(
                addrs.reward, orchestrator, items[0], r.service_start_timeout_s
            )
            log.write("reward_warm", calls=calls)
            tpath = write_trainer_yaml(cfg, model, redis.url, run_dir, seed)
            t0 = time.perf_counter()
            sup.start(trainer_spec(tpath), timeout_s=r.service_start_timeout_s)
            stats = await run_grpo(
                cfg.rl,
                orchestrator,
                items,
                sup=sup,
                addrs=addrs,
                redis=redis,
                seed=seed,
                run_dir=run_dir,
                progress=r.progress,
            )
            code = sup.get("trainer").popen.wait()
            seconds = time.perf_counter() - t0
            devices = process_devices(sup)
    finally:
        redis.close()
    return RlOutcome(trainer_exit=code, stats=stats, seconds=seconds, devices=devices)
