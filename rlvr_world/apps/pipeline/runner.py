"""``rlvr-world run CONFIG``: the whole language world-model pipeline on one machine.

Order: build the prompt items (train / held-out), build the tiny model (or take ``model.path``),
SFT warm-up (in this process), start the embedded Redis and the reward, decoder and rollout
services (supervised processes on free loopback ports), evaluate greedily on the held-out split,
start the trainer process (``rlvr-world train`` with a generated config, starting from the SFT
weights and checkpointing every step), run the orchestrator here until the trainer finishes, wait
until the rollout service serves the final weights, evaluate again, write the report.

Run directory: ``data/`` (items), ``model/`` (base, sft), ``redis/``, ``logs/`` (one per process),
``trainer/`` (checkpoints, ``train_log.jsonl``), ``ledger.jsonl``, ``pipeline_log.jsonl``,
``eval_<name>.jsonl`` (answers), ``curve.png``, ``report.md``, ``summary.json``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from rlvr_world.apps.orchestrator.clients import ServiceClients
from rlvr_world.apps.orchestrator.ledger import Ledger
from rlvr_world.apps.orchestrator.metrics import OrchestratorMetrics
from rlvr_world.apps.orchestrator.worker import Orchestrator, OrchestratorConfig, RunStats
from rlvr_world.apps.pipeline.config import PipelineConfig
from rlvr_world.apps.pipeline.data import build_items
from rlvr_world.apps.pipeline.evaluate import EvalReport, evaluate
from rlvr_world.apps.pipeline.report import plot_curve, train_steps, write_report
from rlvr_world.apps.pipeline.stack import Addresses, start_services, trainer_spec
from rlvr_world.apps.supervisor import Supervisor
from rlvr_world.items import PromptItem, save_items
from rlvr_world.queue.server import RedisHandle, start_embedded
from rlvr_world.queue.stream import Producer, QueueMetrics, StreamNames
from rlvr_world.runlog import JsonlLog

logger = logging.getLogger(__name__)

WEIGHTS_KEY = "rlvr:weights:latest"


def requests_forever(items: list[PromptItem], seed: int) -> Iterator[tuple[str, PromptItem]]:
    """``(key, item)`` pairs: the items reshuffled every epoch, keys unique per epoch."""
    import random

    rng = random.Random(seed)
    for epoch in itertools.count():
        order = list(items)
        rng.shuffle(order)
        for item in order:
            yield f"{item.prompt_id}@{epoch}", item


def latest_version(handle: RedisHandle) -> int:
    """The trainer's last published weights version (0 before the first)."""
    raw = handle.client.get(WEIGHTS_KEY)
    return int(json.loads(raw)["version"]) if raw else 0


def trainer_config(
    cfg: PipelineConfig, model: Path, redis_url: str, run_dir: Path
) -> dict[str, Any]:
    """The trainer's YAML (``trainer.config.TrainerConfig``) for this run."""
    rl = cfg.rl
    return {
        "model": {"path": str(model), "temperature": rl.temperature},
        "optim": {"lr": rl.lr},
        "grpo": {"kl_coef": rl.kl_coef},
        "batch": {"groups_per_step": rl.groups_per_step, "micro_batch_size": rl.micro_batch_size},
        "queue": {
            "redis_url": redis_url,
            "max_staleness": rl.max_staleness,
            "idle_timeout_s": cfg.run.trainer_idle_timeout_s,
        },
        "run": {
            "run_dir": str(run_dir),
            "total_steps": rl.steps,
            "checkpoint_every": 1,
            "keep_checkpoints": 2,
            "device": "cpu",
            "progress": False,
        },
    }


def orchestrator_config(cfg: PipelineConfig) -> OrchestratorConfig:
    rl = cfg.rl
    return OrchestratorConfig(
        group_size=rl.group_size,
        max_tokens=rl.max_tokens,
        temperature=rl.temperature,
        max_inflight=rl.max_inflight,
        max_staleness=rl.max_staleness,
        variant=rl.reward_variant,
        reward_type=rl.reward_type,
        drain_s=5.0,
    )


async def orchestrate_until_trainer_exits(
    cfg: OrchestratorConfig,
    sup: Supervisor,
    addrs: Addresses,
    redis: RedisHandle,
    requests: Iterator[tuple[str, PromptItem]],
    *,
    run_dir: Path,
    max_len: int,
    total: int,
    progress: bool,
) -> RunStats:
    """Feed ``requests`` through the services into the stream (bound ``max_len``) until the
    supervised trainer process exits; the ledger goes to ``run_dir/ledger.jsonl``."""
    clients = ServiceClients(addrs.rollout, addrs.decoder, addrs.reward)
    registry = CollectorRegistry()
    producer = Producer(redis.client, StreamNames(), max_len, QueueMetrics(registry))
    ledger = Ledger(run_dir / "ledger.jsonl")
    orch = Orchestrator(
        cfg,
        clients,
        producer=producer,
        ledger=ledger,
        metrics=OrchestratorMetrics(registry),
        latest_version=lambda: latest_version(redis),
        progress=progress,
    )
    try:
        return await orch.run(requests, stop=lambda: not sup.alive("trainer"), total=total)
    finally:
        ledger.close()
        await clients.close()


class PipelineRun:
    """One run; ``run()`` does everything and returns the summary."""

    def __init__(self, cfg: PipelineConfig, config_path: str = "") -> None:
        self.cfg, self.config_path = cfg, config_path
        self.run_dir = cfg.run.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log = JsonlLog(self.run_dir / "pipeline_log.jsonl")
        self.summary: dict[str, Any] = {"config": config_path}

    def prepare(self) -> tuple[list[PromptItem], list[PromptItem], Path]:
        """Items, the model directory (tiny built here), and SFT when configured."""
        train, test = build_items(self.cfg.data)
        save_items(train, self.run_dir / "data" / "train.jsonl")
        save_items(test, self.run_dir / "data" / "test.jsonl")
        self.log.write("data", train=len(train), test=len(test))
        model = self._base_model(train + test)
        if self.cfg.sft.enabled:
            model = self._sft(model, train)
        return train, test, model

    def _base_model(self, items: list[PromptItem]) -> Path:
        if self.cfg.model.path is not None:
            return self.cfg.model.path
        from rlvr_world.tiny_model import build_tiny_lm

        assert self.cfg.model.tiny is not None
        corpus = [i.prompt for i in items] + [i.target for i in items]
        return build_tiny_lm(self.run_dir / "model" / "base", corpus, self.cfg.model.tiny)

    def _sft(self, model: Path, train: list[PromptItem]) -> Path:
        from trainer.sft import SftConfig, run_sft

        s = self.cfg.sft
        sft_cfg = SftConfig(
            epochs=s.epochs, lr=s.lr, batch_size=s.batch_size, torch_threads=s.torch_threads
        )
        result = run_sft(
            model,
            [(i.prompt, i.target) for i in train],
            self.run_dir / "model" / "sft",
            sft_cfg,
            on_epoch=lambda e, loss: self.log.write("sft_epoch", epoch=e, loss=loss),
        )
        self.summary["sft_s"] = result.seconds
        self.log.write("sft", steps=result.steps, seconds=result.seconds, losses=result.losses)
        return result.path

    async def _eval(self, name: str, addrs: Addresses, test: list[PromptItem]) -> EvalReport:
        clients = ServiceClients(addrs.rollout, addrs.decoder, addrs.reward)
        try:
            report, answers = await evaluate(
                clients,
                test,
                max_tokens=self.cfg.eval.max_tokens,
                variant=self.cfg.rl.reward_variant,
            )
        finally:
            await clients.close()
        with (self.run_dir / f"eval_{name}.jsonl").open("w") as fh:
            for a in answers:
                fh.write(json.dumps(asdict(a)) + "\n")
        self.log.write("eval", name=name, **report.to_dict())
        logger.info(
            "held-out %s: accuracy %.3f, mean reward %.3f",
            name,
            report.accuracy,
            report.mean_reward,
        )
        return report

    async def _grpo(
        self, sup: Supervisor, addrs: Addresses, redis: RedisHandle, train: list[PromptItem]
    ) -> RunStats:
        rl = self.cfg.rl
        return await orchestrate_until_trainer_exits(
            orchestrator_config(self.cfg),
            sup,
            addrs,
            redis,
            requests_forever(train, self.cfg.data.seed),
            run_dir=self.run_dir,
            max_len=rl.groups_per_step * max(1, rl.max_staleness),
            total=rl.steps * rl.groups_per_step,
            progress=self.cfg.run.progress,
        )

    async def _await_version(self, addrs: Addresses, version: int, timeout_s: float = 120.0) -> int:
        clients = ServiceClients(addrs.rollout, addrs.decoder, addrs.reward)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                served = await clients.served_version()
                if served >= version or time.monotonic() > deadline:
                    return served
                await asyncio.sleep(0.25)
        finally:
            await clients.close()

    async def run_async(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        train, test, model = self.prepare()
        redis = start_embedded(self.run_dir / "redis")
        evals: dict[str, dict[str, Any]] = {}
        try:
            with Supervisor(self.run_dir) as sup:
                r = self.cfg.run
                addrs = start_services(
                    sup,
                    model=model,
                    redis_url=redis.url,
                    max_tokens=max(self.cfg.rl.max_tokens, self.cfg.eval.max_tokens),
                    reward_workers=r.reward_workers,
                    timeout_s=r.service_start_timeout_s,
                )
                self.log.write("services", **asdict(addrs))
                if self.cfg.eval.enabled:
                    evals["before"] = (await self._eval("before", addrs, test)).to_dict()
                tcfg = trainer_config(self.cfg, model, redis.url, self.run_dir / "trainer")
                tpath = self.run_dir / "trainer.yaml"
                tpath.write_text(yaml.safe_dump(tcfg, sort_keys=False))
                t1 = time.perf_counter()
                sup.start(trainer_spec(tpath), timeout_s=r.service_start_timeout_s)
                stats = await self._grpo(sup, addrs, redis, train)
                code = sup.get("trainer").popen.wait()
                self.summary["grpo_s"] = time.perf_counter() - t1
                final = latest_version(redis)
                served = await self._await_version(addrs, final)
                self.summary.update(
                    trainer_exit=code,
                    trainer_steps=final,
                    served_version=served,
                    pushed=stats.pushed,
                    failed=stats.failed,
                    samples=stats.samples,
                    samples_per_s=stats.samples / max(self.summary["grpo_s"], 1e-9),
                )
                self.log.write("grpo", **self.summary)
                if self.cfg.eval.enabled:
                    evals["after"] = (await self._eval("after", addrs, test)).to_dict()
        finally:
            redis.close()
        self.summary["wall_s"] = time.perf_counter() - t0
        self.summary["eval"] = evals
        steps = train_steps(self.run_dir / "trainer" / "train_log.jsonl")
        plot = plot_curve(steps, evals, self.run_dir / "curve.png")
        write_report(self.run_dir, self.summary, evals, plot)
        (self.run_dir / "summary.json").write_text(json.dumps(self.summary, indent=2))
        self.log.write("end", **{k: v for k, v in self.summary.items() if k != "eval"})
        self.log.close()
        return self.summary


def run_pipeline(cfg: PipelineConfig, config_path: str = "") -> dict[str, Any]:
    """Run the pipeline (module docstring); returns the summary (also in ``summary.json``)."""
    return asyncio.run(PipelineRun(cfg, config_path).run_async())
