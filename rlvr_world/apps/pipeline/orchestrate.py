"""``rlvr-world orchestrate CONFIG``: a language run's GRPO feed against services that run already.

The deployable half of ``rlvr-world run``: in docker compose or Kubernetes the reward, decoder and
rollout services, Redis and the trainer are containers, and this process is the one that
produces work. For the config's task (``text_game`` or ``web``; another task is refused with the
reason) it builds the run's items (``run.seed``, as ``rlvr-world run`` does), waits until every
service answers its health check, evaluates the start greedily on the held-out items, feeds the
train items through rollout -> decoder -> reward into the Redis Stream until the trainer has
published ``rl.steps`` versions (the trainer's ``run.total_steps``: give both the same number),
waits for the rollout service to serve the last one, evaluates it (RLVR), and writes into
``--out``: ``eval_start.jsonl``, ``eval_rlvr.jsonl``, ``ledger.jsonl`` and ``summary.json`` with
a ``headline`` of RLVR against the start on the same items (paired bootstrap) and the always
"no change" baseline. The control (continued SFT) trains in the process that runs it and is not
part of a deployment: ``rlvr-world run`` gives it.

Addresses come from flags or the environment (``apps.run.endpoints``: ``RLVR_ORCHESTRATOR_*``,
``RLVR_REDIS_URL``); ``dns:///reward:50051`` balances over every
replica. Credentials are the services' (``RLVR_API_TOKEN``). Restarted after a crash once the
trainer has published a version, it does not evaluate the start again (the served weights are no
longer the start's): it reuses ``eval_start.jsonl`` and ``eval_start.json`` from ``--out`` when
they hold an answer for every held-out item, else the summary says the start was skipped and has
no headline; then it feeds on (the stream and the trainer's checkpoints hold the run). What it
does not do: start services, train, or SFT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, start_http_server

from rlvr_world.apps.orchestrator.ledger import Ledger
from rlvr_world.apps.orchestrator.metrics import OrchestratorMetrics
from rlvr_world.apps.orchestrator.worker import Orchestrator
from rlvr_world.apps.pipeline.config import PipelineConfig, load_pipeline_config
from rlvr_world.apps.pipeline.evaluate import Answer, evaluate_served
from rlvr_world.apps.pipeline.results import aligned_scores, always_no_change
from rlvr_world.apps.pipeline.tasks import TASKS, task_of
from rlvr_world.apps.run.configfile import parse_overrides, read_config_mapping
from rlvr_world.apps.run.endpoints import Endpoints, endpoints
from rlvr_world.apps.run.grpo import orchestrator_config, requests_forever, trainer_config
from rlvr_world.apps.supervisor import GrpcHealth
from rlvr_world.devices import Placement
from rlvr_world.items import PromptItem
from rlvr_world.queue.server import REDIS_URL_ENV, RedisHandle, connect
from rlvr_world.queue.stream import Producer, QueueMetrics, StreamNames
from rlvr_world.queue.weights import latest_version
from rlvr_world.stats import paired_bootstrap
from rlvr_world.wire.services import ServiceClients

logger = logging.getLogger(__name__)


class OrchestrateError(RuntimeError):
    """What stops ``orchestrate`` before or instead of training, with the reason."""


def load_config(path: Path, overrides: dict[str, Any]) -> PipelineConfig:
    """The run's config; ``OrchestrateError`` for a task this command does not feed."""
    task = str(read_config_mapping(path).get("task") or "text_game")
    if task not in TASKS:  # the language tasks (their recipes: apps.pipeline.tasks)
        raise OrchestrateError(
            f"{path}: task {task!r}; orchestrate feeds {' and '.join(TASKS)} runs "
            f"(run this config with `rlvr-world run {path}`)"
        )
    return load_pipeline_config(path, overrides)


async def wait_healthy(ends: Endpoints, timeout_s: float) -> None:
    """Until the three services answer SERVING; ``OrchestrateError`` naming those that never
    did (a wrong address or a service that is down)."""
    checks = {
        name: GrpcHealth(getattr(ends, name).removeprefix("dns:///").split(",")[0])
        for name in ("rollout", "decoder", "reward")
    }
    deadline = time.monotonic() + timeout_s
    pending = dict(checks)
    while pending:
        pending = {n: c for n, c in pending.items() if not await asyncio.to_thread(c.ready, Path())}
        if pending and time.monotonic() > deadline:
            named = ", ".join(f"{n} at {c.address}" for n, c in pending.items())
            raise OrchestrateError(f"not serving after {timeout_s:.0f}s: {named}")
        if pending:
            await asyncio.sleep(1.0)


class Orchestrate:
    """One deployment run of a config (module docstring)."""

    def __init__(
        self, cfg: PipelineConfig, ends: Endpoints, out: Path, metrics_port: int | None = None
    ) -> None:
        self.cfg, self.ends, self.out = cfg, ends, out
        self.out.mkdir(parents=True, exist_ok=True)
        self.summary: dict[str, Any] = {"task": cfg.task, "seed": cfg.run.seed}
        self.registry = CollectorRegistry()
        self.metrics = OrchestratorMetrics(self.registry)
        if metrics_port is not None:  # /metrics for Prometheus (rlvr_orchestrator_*)
            start_http_server(metrics_port, registry=self.registry)

    def _clients(self) -> ServiceClients:
        return ServiceClients(self.ends.rollout, self.ends.decoder, self.ends.reward)

    async def _evaluate(self, name: str, items: list[PromptItem]) -> list[Answer]:
        report, answers = await evaluate_served(
            self.ends.rollout,
            self.ends.decoder,
            self.ends.reward,
            items,
            max_tokens=self.cfg.eval.max_tokens,
            variant=self.cfg.rl.reward_variant,
        )
        with (self.out / f"eval_{name}.jsonl").open("w") as fh:
            for a in answers:
                fh.write(json.dumps(asdict(a)) + "\n")
        (self.out / f"eval_{name}.json").write_text(json.dumps(report.to_dict()))
        self.summary.setdefault("eval", {})[name] = report.to_dict()
        logger.info("held-out %s: %s (n=%d)", name, report.to_dict()["mean_reward"], report.n)
        return answers

    def _earlier_start(self, test: list[PromptItem]) -> list[Answer] | None:
        """The start's answers an earlier process of this run wrote, when they are complete (one
        for every held-out item, and its report) and readable; else None."""
        lines, report = self.out / "eval_start.jsonl", self.out / "eval_start.json"
        try:
            answers = [Answer(**json.loads(ln)) for ln in lines.read_text().splitlines() if ln]
            self.summary.setdefault("eval", {})["start"] = json.loads(report.read_text())
        except (OSError, ValueError, TypeError) as exc:  # missing, torn or foreign
            logger.warning("no earlier start evaluation to reuse in %s (%s)", self.out, exc)
            return None
        if sorted(a.prompt_id for a in answers) != sorted(i.prompt_id for i in test):
            logger.warning("the earlier start evaluation in %s is incomplete", self.out)
            return None
        return answers

    async def _feed(self, redis: RedisHandle, train: list[PromptItem]) -> None:
        rl = self.cfg.rl
        producer = Producer(
            redis.client, StreamNames(), rl.stream_bound, QueueMetrics(self.registry)
        )
        orch_cfg = orchestrator_config(
            rl,
            seed=self.cfg.run.seed,
            max_tokens=rl.max_tokens,
            variant=rl.reward_variant,
            reward_type=rl.reward_type or "",
        )
        clients = self._clients()
        ledger = Ledger(self.out / "ledger.jsonl")
        orch = Orchestrator(
            orch_cfg,
            clients,
            producer=producer,
            ledger=ledger,
            metrics=self.metrics,
            latest_version=lambda: latest_version(redis.client),
            progress=self.cfg.run.progress,
        )
        try:
            stats = await orch.run(
                requests_forever(train, self.cfg.run.seed),
                stop=lambda: latest_version(redis.client) >= rl.steps,
                total=rl.total_groups,
            )
        finally:
            producer.close()
            ledger.close()
            await clients.close()
        self.summary.update(pushed=stats.pushed, failed=stats.failed, feed_s=stats.seconds)

    async def _served(self, version: int, timeout_s: float) -> int:
        clients = self._clients()
        deadline = time.monotonic() + timeout_s
        try:
            while (served := await clients.served_version()) < version:
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            return served
        finally:
            await clients.close()

    async def run(self) -> dict[str, Any]:
        """Everything of the module docstring; the summary (also in ``summary.json``)."""
        t0 = time.perf_counter()
        task = task_of(self.cfg)
        train, test, stats = task.items(self.cfg)
        if task.fit_needs_policy:  # e.g. the web's token-length filter, by the served tokenizer
            if self.cfg.model.path is None:
                raise OrchestrateError(
                    f"a {task.name} run needs the policy's folder to filter its items: "
                    "--set model.path=DIR (the folder the rollout service serves)"
                )
            train, test, stats = task.fit(self.cfg, self.cfg.model.path, (train, test, stats))
        self.summary["data"] = {"train": len(train), "test": len(test), **stats}
        await wait_healthy(self.ends, self.cfg.run.service_start_timeout_s)
        try:
            redis = connect(self.out, self.ends.redis)
        except Exception as exc:
            raise OrchestrateError(f"redis at {self.ends.redis}: {exc}") from exc
        try:
            answers: dict[str, list[Answer]] = {}
            if latest_version(redis.client) == 0:
                answers["start"] = await self._evaluate("start", test)
            elif (earlier := self._earlier_start(test)) is not None:
                answers["start"] = earlier
                self.summary["start_reused"] = "eval_start.jsonl of an earlier process of the run"
            else:
                self.summary["start_skipped"] = "the trainer had published a version already"
            await self._feed(redis, train)
            final = latest_version(redis.client)
        finally:
            redis.close()
        self.summary.update(trainer_steps=final, served_version=await self._served(final, 300.0))
        answers["rlvr"] = await self._evaluate("rlvr", test)
        if "start" in answers:
            self.summary["headline"] = self._headline(answers, test)
        self.summary["wall_s"] = time.perf_counter() - t0
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=1, default=str))
        return self.summary

    def _headline(self, answers: dict[str, list[Answer]], test: list[PromptItem]) -> dict[str, Any]:
        task, variant = task_of(self.cfg), self.cfg.rl.reward_variant
        metric = task.metric
        _, scores, _ = aligned_scores(answers, metric.per_item)
        diff = paired_bootstrap(scores["rlvr"], scores["start"])
        baseline = always_no_change(test, lambda i: task.no_change_reward(i, variant))
        return {
            "metric": metric.name,
            "n": diff.n,
            "seeds": [self.cfg.run.seed],
            "start": sum(scores["start"]) / max(diff.n, 1),
            "control": None,
            "control_note": "not run by orchestrate: `rlvr-world run` trains the control",
            "rlvr": sum(scores["rlvr"]) / max(diff.n, 1),
            "rlvr_minus_start": diff.mean,
            "ci95_vs_start": diff.as_list(),
            "ci95_excludes_zero": diff.excludes_zero,
            "baselines": {"always_no_change": baseline["all"]},
        }


def run_orchestrate(args: argparse.Namespace) -> int:
    """The command: ``rlvr-world orchestrate CONFIG``; exit 2 with the reason when refused."""
    overrides = parse_overrides(args.overrides)
    try:
        cfg = load_config(args.config, overrides)
        ends = endpoints(vars(args), os.environ)
        summary = asyncio.run(Orchestrate(cfg, ends, args.out, args.metrics_port).run())
    except (OrchestrateError, ValueError, FileNotFoundError) as exc:  # EndpointError included
        print(f"rlvr-world orchestrate: error: {exc}")
        return 2
    head = summary.get("headline")
    if head is not None:
        low, high = head["ci95_vs_start"]
        print(
            f"{head['metric']}: start {head['start']:.3f}, RLVR {head['rlvr']:.3f}, RLVR - start "
            f"{head['rlvr_minus_start']:+.3f} [{low:+.3f}, {high:+.3f}] (n={head['n']})"
        )
    print(f"{summary['trainer_steps']} trainer steps; results in {args.out}")
    return 0


def run_train_run(args: argparse.Namespace) -> int:
    """``rlvr-world train-run CONFIG``: the trainer of the config's GRPO phase, as ``rlvr-world
    run`` configures it (``apps.run.grpo.trainer_config`` of its ``rl`` section), from the model
    folder ``--model``, checkpointing into ``--run-dir``, on ``$RLVR_REDIS_URL``. One config
    then drives both sides of a deployment (this and ``orchestrate``). Exit 2 with the reason
    when the config or the model folder is refused."""
    from trainer.cli import main as trainer_main

    try:
        cfg = load_config(args.config, parse_overrides(args.overrides))
        if not (args.model / "config.json").is_file():
            raise OrchestrateError(
                f"--model {args.model}: no model folder there (config.json missing); "
                "`rlvr-world model start CONFIG DIR` writes one"
            )
    except (OrchestrateError, ValueError, FileNotFoundError) as exc:
        print(f"rlvr-world train-run: error: {exc}")
        return 2
    placement = Placement.resolve(cfg.run.device, cfg.run.precision)
    data = trainer_config(
        cfg.rl,
        model=args.model,
        redis_url=os.environ.get(REDIS_URL_ENV, ""),
        trainer_dir=args.run_dir,
        device=placement.device,
        precision=placement.precision,
        idle_timeout_s=0.0,
        seed=cfg.run.seed,
        backend=cfg.model.backend,
    )
    data["queue"].pop("redis_url")  # $RLVR_REDIS_URL, read by the trainer itself
    data["run"]["checkpoint_every"] = args.checkpoint_every
    if args.metrics_port is not None:
        data["run"]["prometheus_port"] = args.metrics_port
    args.run_dir.mkdir(parents=True, exist_ok=True)
    path = args.run_dir / "trainer.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return trainer_main(["--config", str(path), *(["--resume"] if args.resume else [])])
