"""Phase 4 of the video run (RLVR): the services, the queue-fed trainer and the orchestrator.

``run_rl`` starts the embedded Redis and, under a ``Supervisor``, the reward service, the decoder
(serving ``DecodeFrames`` with the frame tokenizer) and the rollout service (the MLE model) on
loopback, then the trainer from a generated YAML (it starts from the MLE weights and checkpoints
every step), and feeds the train items through the orchestrator until the trainer exits. What it
derives from the run configuration is computed by plain functions here: the items
(``rl_items``), the trainer's YAML (``trainer_config``), the orchestrator's settings
(``orchestrator_config``) and the rollout's token limit (``rollout_max_tokens``).

It does not evaluate, and it writes no summary: ``VideoRun.rl`` records the outcome.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from rlvr_world.apps.orchestrator.worker import OrchestratorConfig, RunStats
from rlvr_world.apps.pipeline.runner import orchestrate_until_trainer_exits, requests_forever
from rlvr_world.apps.pipeline.stack import start_services, trainer_spec
from rlvr_world.apps.supervisor import Supervisor
from rlvr_world.apps.video.config import VideoPipelineConfig
from rlvr_world.items import PromptItem, video_item
from rlvr_world.queue.server import start_embedded
from rlvr_world.runlog import JsonlLog
from rlvr_world.video.data import ClipArrays
from rlvr_world.video.layout import TokenSequence
from rlvr_world.video.world_model import visual_ids


@dataclass(frozen=True)
class RlOutcome:
    """How the RLVR phase ended."""

    trainer_exit: int
    stats: RunStats
    seconds: float  # from the trainer's start to its exit


def rl_items(
    clips: Sequence[ClipArrays],
    sequences: Sequence[TokenSequence],
    tokens_per_frame: int,
    multi_step: bool,
) -> list[PromptItem]:
    """One prompt item per train clip: the next frame, or the multi-step rollout of the clip."""
    if multi_step:
        from rlvr_world.video.multistep import multistep_item

        return [
            multistep_item(f"clip{i:05d}", seq, frames)
            for i, ((frames, _), seq) in enumerate(zip(clips, sequences, strict=True))
        ]
    return [
        video_item(
            f"clip{i:05d}",
            seq.prompt_ids,
            frames[-1],
            frames[-2],
            target_tokens=seq.response_ids[:tokens_per_frame],
        )
        for i, ((frames, _), seq) in enumerate(zip(clips, sequences, strict=True))
    ]


def trainer_config(
    cfg: VideoPipelineConfig, model: Path, redis_url: str, run_dir: Path
) -> dict[str, Any]:
    """The trainer's YAML (``trainer.config.TrainerConfig``), writing under ``run_dir/trainer``."""
    rl = cfg.rl
    return {
        "model": {"path": str(model), "temperature": rl.temperature},
        "optim": {"lr": rl.lr},
        "grpo": {"kl_coef": rl.kl_coef},
        "batch": {
            "groups_per_step": rl.groups_per_step,
            "micro_batch_size": rl.micro_batch_size,
        },
        "queue": {
            "redis_url": redis_url,
            "max_staleness": rl.max_staleness,
            "idle_timeout_s": cfg.run.trainer_idle_timeout_s,
        },
        "run": {
            "run_dir": str(run_dir / "trainer"),
            "total_steps": rl.steps,
            "checkpoint_every": 1,
            "keep_checkpoints": 2,
            "device": cfg.run.device,
            "progress": False,
        },
    }


def write_trainer_yaml(
    cfg: VideoPipelineConfig, model: Path, redis_url: str, run_dir: Path
) -> Path:
    """``trainer_config`` written to ``run_dir/trainer.yaml``; returns the path."""
    path = run_dir / "trainer.yaml"
    path.write_text(yaml.safe_dump(trainer_config(cfg, model, redis_url, run_dir), sort_keys=False))
    return path


def rollout_max_tokens(cfg: VideoPipelineConfig, tokens_per_frame: int, action_dims: int) -> int:
    """The rollout server's token limit: one frame, or S - 1 frames and their actions."""
    if cfg.model.layout == "multi_step":
        steps = cfg.model.segment_frames - 1
        return steps * (tokens_per_frame + action_dims)
    return tokens_per_frame


def orchestrator_config(
    cfg: VideoPipelineConfig, tokens_per_frame: int, vocab: Any
) -> OrchestratorConfig:
    """Sampling restricted to the visual ids, ``tokens_per_frame`` per generated frame."""
    rl = cfg.rl
    return OrchestratorConfig(
        group_size=rl.group_size,
        max_tokens=tokens_per_frame,
        temperature=rl.temperature,
        max_inflight=rl.max_inflight,
        max_staleness=rl.max_staleness,
        allowed_tokens=(0, len(visual_ids(vocab))),
        ignore_eos=True,
        video_weights=dict(rl.weights),
        drain_s=5.0,
    )


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
    model: Path,
    tokenizer_dir: Path,
    items: list[PromptItem],
    max_tokens: int,
    orchestrator: OrchestratorConfig,
) -> RlOutcome:
    """Start Redis and the services, train from ``model`` until the trainer exits (module
    docstring); the services' addresses go to ``log``."""
    r, rl = cfg.run, cfg.rl
    redis = start_embedded(run_dir / "redis")
    try:
        with Supervisor(run_dir) as sup:
            addrs = start_services(
                sup,
                model=model,
                redis_url=redis.url,
                max_tokens=max_tokens,
                timeout_s=r.service_start_timeout_s,
                video_tokenizer=tokenizer_dir,
            )
            log.write("services", **asdict(addrs))
            tpath = write_trainer_yaml(cfg, model, redis.url, run_dir)
            t0 = time.perf_counter()
            sup.start(trainer_spec(tpath), timeout_s=r.service_start_timeout_s)
            stats = await orchestrate_until_trainer_exits(
                orchestrator,
                sup,
                addrs,
                redis,
                requests_forever(items, cfg.data.seed),
                run_dir=run_dir,
                max_len=rl.groups_per_step * max(1, rl.max_staleness),
                total=rl.steps * rl.groups_per_step,
                progress=r.progress,
            )
            code = sup.get("trainer").popen.wait()
            seconds = time.perf_counter() - t0
    finally:
        redis.close()
    return RlOutcome(trainer_exit=code, stats=stats, seconds=seconds)
