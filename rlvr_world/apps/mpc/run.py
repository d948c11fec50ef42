"""``rlvr-world run`` for ``task: mpc`` and ``task: policy_eval``: run, write summary and report.

``run_mpc``: the tasks (``rlvr_world.mpc.episode.make_tasks``), then every planner of
``run.planners`` on every task (oracle: the simulator; random: random actions; base / rlvr:
the world models of ``models``, loaded once; a model that fails to load makes each of its
episodes a fault with the reason), ``summary.json`` (``headline`` per planner and RLVR - base,
every episode's record), ``report.md`` and ``trajectory.png``.

``run_policy_eval``: the policies of ``policies`` in the real simulator and inside each world
model (``rlvr_world.mpc.policy_eval``), ``summary.json`` (``headline`` per model: MAE of the
success estimates with its interval, Spearman, and RLVR - base) and ``report.md``. A world model
that fails to load is reported under ``faults`` and left out of the comparison.

Both run in the world models' action space (``run_space``: ``rlvr_world.mpc.space``): a model
trained at ``data.frame_skip`` k on ``agent_relative`` moves (``configs/video/pusht_skip.yaml``)
plans and is evaluated one model step (k simulator steps, one move from the agent) at a time,
and the oracle, the random planner and the simulator's policy rollouts step the same way; a
start/goal pair is ``tasks.goal_steps`` model steps apart.

What it does not do: no training (``models.build_tiny`` only builds random smoke models).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from rlvr_world.apps.mpc.config import ModelsSection, MpcConfig, PolicyEvalConfig
from rlvr_world.apps.mpc.report import mpc_headline, mpc_report, policy_report, write_trajectory
from rlvr_world.devices import resolve_device
from rlvr_world.mpc.dynamics import (
    Dynamics,
    ModelUnavailable,
    OracleDynamics,
    WorldModelDynamics,
    load_world_model_dynamics,
)
from rlvr_world.mpc.episode import EpisodeResult, EpisodeSettings, Task, make_tasks, run_episode
from rlvr_world.mpc.planner import PlannerConfig
from rlvr_world.mpc.sim import FRAME_SIDE, PushTSim
from rlvr_world.mpc.space import ActionSpace

logger = logging.getLogger(__name__)


def load_models(m: ModelsSection) -> dict[str, WorldModelDynamics | ModelUnavailable]:
    """``base`` and ``rlvr``: the loaded model, or the ``ModelUnavailable`` loading raised."""
    import torch

    torch.set_num_threads(m.torch_threads)
    if m.build_tiny:
        from rlvr_world.apps.mpc.tiny import ensure_tiny_models

        ensure_tiny_models(m)
    out: dict[str, WorldModelDynamics | ModelUnavailable] = {}
    for name, path in (("base", m.base), ("rlvr", m.rlvr)):
        try:
            out[name] = load_world_model_dynamics(
                name,
                path,
                spec_path=m.spec,
                tokenizer_path=m.tokenizer,
                anchor_dilate=m.anchor_dilate,
                batch_size=m.batch_size,
                device=resolve_device(m.device, "models.device"),
                frame_skip=m.frame_skip,
            )
        except ModelUnavailable as exc:
            logger.error("world model %s unavailable: %s", name, exc)
            out[name] = exc
    return out


def run_side(models: dict[str, WorldModelDynamics | ModelUnavailable]) -> int:
    """The side of the frames the simulator renders: the loaded models' (``ValueError`` when they
    differ), else ``FRAME_SIDE``."""
    sides = {d.side for d in models.values() if isinstance(d, WorldModelDynamics)}
    if len(sides) > 1:
        raise ValueError(f"models: the world models read frames of different sides {sorted(sides)}")
    return sides.pop() if sides else FRAME_SIDE


def run_space(
    models: dict[str, WorldModelDynamics | ModelUnavailable], m: ModelsSection
) -> ActionSpace:
    """The run's action space: the loaded models' (``ValueError`` when they differ), else, with
    none loaded, absolute targets at ``models.frame_skip`` (1 unset)."""
    spaces = {name: d.space for name, d in models.items() if isinstance(d, WorldModelDynamics)}
    if len(set(spaces.values())) > 1:
        shown = {k: v.to_dict() for k, v in spaces.items()}
        raise ValueError(f"models: the world models act in different action spaces: {shown}")
    if spaces:
        return next(iter(spaces.values()))
    return ActionSpace(frame_skip=m.frame_skip or 1)


def _write(run_dir: Path, summary: dict[str, Any], report: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (run_dir / "report.md").write_text(report)


def _settings(cfg: MpcConfig, space: ActionSpace) -> EpisodeSettings:
    p = cfg.planner
    pcfg = p.to(PlannerConfig, low=space.low, high=space.high)
    return EpisodeSettings(
        pcfg, p.execute, p.replans, cfg.success.position, cfg.success.angle, cfg.run.seed, space
    )


def _tasks(cfg: MpcConfig, sim: PushTSim, n: int, space: ActionSpace) -> list[Task]:
    t = cfg.tasks
    return make_tasks(
        sim,
        n,
        goal_steps=t.goal_steps,
        min_move=t.min_move,
        record_steps=t.record_steps,
        seed=t.seed,
        frame_skip=space.frame_skip,
    )


def run_mpc(cfg: MpcConfig, config_path: str) -> dict[str, Any]:
    """The MPC comparison (module docstring); returns the summary. With ``run.summarize_only``
    it plans nothing but summarises ``episodes.jsonl`` (``summarize_mpc``)."""
    if cfg.run.summarize_only:
        return summarize_mpc(cfg, config_path)
    t0 = time.perf_counter()
    r = cfg.run
    models = load_models(cfg.models) if {"base", "rlvr"} & set(r.planners) else {}
    space, side = run_space(models, cfg.models), run_side(models)
    settings = _settings(cfg, space)
    results: list[EpisodeResult] = []
    with PushTSim(side) as sim, PushTSim(side) as planning_sim:
        tasks = _tasks(cfg, sim, cfg.tasks.episodes, space)[cfg.tasks.start :]
        oracle = OracleDynamics(planning_sim, space=space)
        dyns: dict[str, Dynamics | ModelUnavailable | None] = {
            name: None if name == "random" else models.get(name, oracle) for name in r.planners
        }
        # task-major, every episode appended to episodes.jsonl as it ends: a run stopped early
        # still has paired results for its first tasks
        r.run_dir.mkdir(parents=True, exist_ok=True)
        with (r.run_dir / "episodes.jsonl").open("w") as log:
            for task in tasks:
                for name in r.planners:
                    res = run_episode(task, name, dyns[name], sim, settings)
                    results.append(res)
                    log.write(json.dumps(res.record()) + "\n")
                    log.flush()
                logger.info("task %d done (%.0f s)", task.index, time.perf_counter() - t0)
    summary = _mpc_summary(cfg, config_path, [res.record() for res in results], len(tasks))
    summary["action_space"], summary["frame_side"] = space.to_dict(), side
    shown = next(
        (
            x
            for x in results
            if x.planner == r.trajectory_planner and x.status == "ok" and x.predicted
        ),
        None,
    )
    if shown is not None:
        _trajectory(summary, r.run_dir, shown, next(t for t in tasks if t.index == shown.task))
    summary["wall_s"] = time.perf_counter() - t0
    _write(r.run_dir, summary, mpc_report(summary))
    return summary


def _mpc_summary(
    cfg: MpcConfig, config_path: str, records: list[dict[str, Any]], n_tasks: int
) -> dict[str, Any]:
    r = cfg.run
    return {
        "task": "mpc",
        "name": r.run_dir.name,
        "run_dir": str(r.run_dir),
        "config": config_path,
        "planners": list(r.planners),
        "planner": cfg.planner.model_dump(),
        "n_tasks": n_tasks,
        "goal_steps": cfg.tasks.goal_steps,
        "success": cfg.success.model_dump(),
        "frame_side": FRAME_SIDE,
        "cost": "mean |pixel difference| (RGB in [0,1]) of the last predicted frame to the goal",
        "models": {k: str(v) for k, v in cfg.models.model_dump().items()},
        "device": resolve_device(cfg.models.device, "models.device"),
        "headline": mpc_headline(
            records,
            r.planners,
            execute=cfg.planner.execute,
            resamples=r.resamples,
            seed=r.seed,
        ),
        "episodes": records,
    }


def _trajectory(summary: dict[str, Any], run_dir: Path, shown: EpisodeResult, task: Task) -> None:
    with PushTSim(task.goal_frame.shape[0]) as sim:
        sim.set_pose(task.start_agent, task.start_block)
        start = sim.frame()
    write_trajectory(
        run_dir / "trajectory.png", shown.real, shown.predicted, start, task.goal_frame
    )
    summary["trajectory_png"] = "trajectory.png"
    summary["trajectory_caption"] = (
        f"Episode {shown.task} of the {shown.planner} planner: real frames after each executed "
        f"action (top) and the frames its chosen plan predicted for them (bottom); success "
        f"{shown.success}, final coverage {shown.coverage:.3f}."
    )


def summarize_mpc(cfg: MpcConfig, config_path: str) -> dict[str, Any]:
    """Summary and report of the episodes in ``run.run_dir/episodes.jsonl`` (a run stopped
    early: only tasks every planner finished count, ``partial`` says so). The picture replays
    task 0 with ``run.trajectory_planner`` (planning is deterministic for the seed)."""
    t0 = time.perf_counter()
    r = cfg.run
    path = r.run_dir / "episodes.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no episodes to summarise")
    rows, seen = [], set()
    for line in path.read_text().splitlines():
        row = json.loads(line) if line.strip() else None
        if row is not None and (row["task"], row["planner"]) not in seen:  # first of repeats
            seen.add((row["task"], row["planner"]))
            rows.append(row)
    done: dict[int, set[str]] = {}
    for row in rows:
        done.setdefault(int(row["task"]), set()).add(str(row["planner"]))
    complete = {t for t, names in done.items() if names >= set(r.planners)}
    records = [row for row in rows if int(row["task"]) in complete and row["planner"] in r.planners]
    summary = _mpc_summary(cfg, config_path, records, len(complete))
    summary["partial"] = len(complete) < cfg.tasks.episodes
    name = r.trajectory_planner
    if name in r.planners and complete:
        models = load_models(cfg.models) if name in ("base", "rlvr") else {}
        with PushTSim(run_side(models)) as sim, PushTSim(run_side(models)) as planning_sim:
            space = run_space(models, cfg.models)
            summary["action_space"] = space.to_dict()
            task = _tasks(cfg, sim, 1, space)[0]
            oracle = OracleDynamics(planning_sim, space=space)
            dyn = None if name == "random" else models.get(name, oracle)
            shown = run_episode(task, name, dyn, sim, _settings(cfg, space))
        if shown.status == "ok" and shown.predicted:
            _trajectory(summary, r.run_dir, shown, task)
    summary["wall_s"] = time.perf_counter() - t0
    _write(r.run_dir, summary, mpc_report(summary))
    return summary


def run_policy_eval(cfg: PolicyEvalConfig, config_path: str) -> dict[str, Any]:
    """The policy-evaluation comparison (module docstring); returns the summary."""
    from rlvr_world.mpc.policy_eval import (
        Outcomes,
        PolicyDef,
        Trials,
        compare_estimates,
        policy_starts,
        rollout_sim,
        rollout_world_model,
    )

    t0 = time.perf_counter()
    e, r = cfg.eval, cfg.run
    policies = [p.to(PolicyDef) for p in cfg.policies]
    models = load_models(cfg.models)
    faults = {k: str(v) for k, v in models.items() if isinstance(v, ModelUnavailable)}
    space = run_space(models, cfg.models)
    outcomes: dict[str, Outcomes] = {}
    seconds: dict[str, float] = {}
    with PushTSim(run_side(models)) as sim:
        starts = policy_starts(sim, e.episodes, e.seed, e.start_distance)
        t = time.perf_counter()
        trials = Trials(
            policies, starts, steps=e.steps, radius=e.goal_radius, seed=e.seed, space=space
        )
        truth = rollout_sim(sim, trials)
        seconds["simulator"] = time.perf_counter() - t
        for name, model in models.items():
            if isinstance(model, ModelUnavailable):
                continue
            t = time.perf_counter()
            outcomes[name] = rollout_world_model(model, sim, trials)
            seconds[name] = time.perf_counter() - t
            logger.info("policy evaluation in %s: %.0f s", name, seconds[name])
    comparison = (
        compare_estimates(truth, outcomes, resamples=r.resamples, seed=r.seed) if outcomes else {}
    )
    n = len(policies) * len(starts)
    headline: dict[str, Any] = {
        "simulator": {
            "metric": "true success rate per policy",
            "n": n,
            "value": truth.rates.tolist(),
            "ci95": None,
        }
    }
    for name, c in comparison.items():
        headline[name] = {
            "metric": "MAE of the success-rate estimates vs the simulator",
            "n": n,
            "value": c["mae"],
            "ci95": c["mae_ci95"],
            "spearman": c["spearman"],
            "spearman_ci95": c["spearman_ci95"],
        }
    if "rlvr" in comparison and "base" in comparison:
        headline["rlvr_minus_base"] = {
            "metric": "MAE rlvr - base",
            "n": n,
            "value": comparison["rlvr"]["mae_minus_base"],
            "ci95": comparison["rlvr"]["mae_minus_base_ci95"],
        }
    summary: dict[str, Any] = {
        "task": "policy_eval",
        "name": r.run_dir.name,
        "run_dir": str(r.run_dir),
        "config": config_path,
        "policies": [p.model_dump() for p in cfg.policies],
        "episodes": len(starts),
        "steps": e.steps,
        "action_space": space.to_dict(),
        "goal_radius": e.goal_radius,
        "sim_rates": truth.rates.tolist(),
        "sim_success": truth.success.astype(int).tolist(),
        "model_success": {k: o.success.astype(int).tolist() for k, o in outcomes.items()},
        "comparison": comparison,
        "faults": faults,
        "seconds": seconds,
        "models": {k: str(v) for k, v in cfg.models.model_dump().items()},
        "device": resolve_device(cfg.models.device, "models.device"),
        "headline": headline,
        "wall_s": time.perf_counter() - t0,
    }
    _write(r.run_dir, summary, policy_report(summary))
    return summary
