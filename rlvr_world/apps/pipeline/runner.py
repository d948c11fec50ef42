"""``rlvr-world run CONFIG``: the whole language world-model pipeline on one machine (the text
game, or ``task: web``: accessibility-tree diffs scored by F1).

Order: build the prompt items (train / held-out, seeded by ``run.seed``), build the tiny model (or
take ``model.path``), SFT warm-up (in this process): that checkpoint is the *start*. Then the
embedded Redis and the reward, decoder and rollout services (supervised processes on free loopback
ports, started at once); greedy held-out evaluation of the start; the trainer process
(``rlvr-world train`` with a generated config, starting from the start weights, checkpointing
every step) fed by the orchestrator until it exits, with a held-out curve point every
``eval.curve_every`` steps. The feed does not wait for the trainer (``apps.run.grpo.run_grpo``
checks its readiness alongside and holds one step's groups until it is ready): without the
start evaluation the trainer is launched with the services; with it, as the feed begins (a
trainer waiting through the evaluation could reach its idle timeout). Then the final weights
served and
evaluated (*RLVR*). Then the *control*: SFT continued from the start for GRPO's budget
(``control.budget``: as many examples as GRPO trained sequences, as many optimizer steps as GRPO
took, or as long as GRPO ran), served
by a second rollout service and evaluated on the same items. The headline compares
the three with paired bootstrap intervals (``apps.pipeline.results``); the report plots the train
reward, the diagnostics and the held-out curve. The task's recipe
(``apps.pipeline.tasks``) decides the data, the filter once the policy's tokenizer exists (a web
run's token lengths), the metric and the always-no-change baseline.

Run directory: ``data/`` (items), ``model/`` (base, sft, control), ``redis/``, ``logs/`` (one per
process), ``trainer/`` (checkpoints, ``train_log.jsonl``), ``ledger.jsonl``,
``pipeline_log.jsonl``, ``eval_<name>.jsonl`` (answers), ``curve.png``, ``report.md``,
``summary.json`` (with ``headline``; ``rollout_engine``: the engine the rollout service reports
(``rollout.engine``: every rollout service of the run uses it); ``startup``: seconds from the
stack's start, after the SFT, to Redis, each process's start and readiness, the GRPO phase and
its first rollout request; ``peak_rss_mib``: each process's peak RSS and their sum,
``apps.memory``; ``sft_epochs``: the warm-up's train and held-out loss per epoch; ``devices``:
the device and precision each phase and process used, as each reported it).

Devices: ``run.device`` and ``run.precision`` are resolved once, when the run is built
(``devices.Placement``: a CUDA device this machine lacks is refused there, before any work),
and the concrete device goes to every phase: SFT and the control (this process), the trainer
(its YAML), the rollout services (the evaluations run on them), the decoder and the reward
service (``stack.start_services``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import yaml

from rlvr_world.apps.memory import PeakRss
from rlvr_world.apps.orchestrator.worker import RunStats
from rlvr_world.apps.pipeline.config import PipelineConfig
from rlvr_world.apps.pipeline.evaluate import Answer, EvalReport, evaluate_served
from rlvr_world.apps.pipeline.report import plot_curve, write_report
from rlvr_world.apps.pipeline.results import always_no_change, headline_summary, reward_trend
from rlvr_world.apps.pipeline.tasks import task_of
from rlvr_world.apps.run.grpo import (
    first_request_time,
    orchestrator_config,
    run_grpo,
    startup_breakdown,
    train_steps,
    trainer_config,
)
from rlvr_world.apps.run.stack import (
    Addresses,
    check_rollout_engine,
    process_devices,
    rollout_spec,
    start_services,
    trainer_spec,
)
from rlvr_world.apps.supervisor import ProcessSpec, Supervisor
from rlvr_world.devices import Placement
from rlvr_world.items import PromptItem, save_items
from rlvr_world.queue.server import RedisHandle, start_embedded
from rlvr_world.queue.weights import latest_version
from rlvr_world.runlog import JsonlLog
from rlvr_world.scaffold.client_auth import ensure_local_token
from rlvr_world.wire.services import ServiceClients

logger = logging.getLogger(__name__)

#: When the trainer process starts: launched with the services or beside the feed (the feed
#: does not wait for it: ``apps.run.grpo.run_grpo``), or started and waited for before the feed.
TrainerStart = Literal["with_services", "beside_feed", "before_feed"]


class PipelineRun:
    """One run; ``run_async()`` does everything and returns the summary."""

    def __init__(self, cfg: PipelineConfig, config_path: str = "") -> None:
        self.cfg, self.config_path = cfg, config_path
        # first: a CUDA device this machine lacks is refused here, before any work
        self.placement = Placement.resolve(cfg.run.device, cfg.run.precision)
        self.seed = cfg.run.seed
        self.run_dir = cfg.run.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log = JsonlLog(self.run_dir / "pipeline_log.jsonl")
        self.summary: dict[str, Any] = {"config": config_path, "seed": self.seed}
        self.answers: dict[str, list[Answer]] = {}
        self.evals: dict[str, dict[str, Any]] = {}
        self.curve: list[dict[str, Any]] = []
        self.task = task_of(cfg)
        self.metric = self.task.metric
        self.test_items: list[PromptItem] = []
        self.marks: dict[str, float | None] = {}  # wall-clock times of the start-up's steps
        #: Where each phase and process ran (``summary["devices"]``).
        run = {"setting": cfg.run.device, **self.placement.as_dict()}
        self.devices: dict[str, Any] = {"run": run}

    # ------------------------------------------------------------------ start checkpoint

    def prepare(self) -> tuple[list[PromptItem], list[PromptItem], Path]:
        """Items, the model directory (tiny built here), and SFT when configured."""
        train, test, stats = self.task.items(self.cfg)
        model = self._base_model(train + test)
        train, test, stats = self.task.fit(self.cfg, model, (train, test, stats))
        save_items(train, self.run_dir / "data" / "train.jsonl")
        save_items(test, self.run_dir / "data" / "test.jsonl")
        self.test_items = test
        changed = sum(1 for i in test if i.changed)
        self.summary["data"] = {
            "train": len(train),
            "test": len(test),
            "test_changed": changed,
            **stats,
        }
        self.log.write("data", **self.summary["data"])
        if self.cfg.sft.enabled:
            model = self._sft(model, train, self.run_dir / "model" / "sft", heldout=test)
        return train, test, model

    def _base_model(self, items: list[PromptItem]) -> Path:
        if self.cfg.model.path is not None:
            return self.cfg.model.path
        from rlvr_world.tiny_model import build_tiny_lm

        assert self.cfg.model.tiny is not None
        shape = self.cfg.model.tiny.model_copy(update={"seed": self.seed})
        corpus = [i.prompt for i in items] + [i.target for i in items]
        return build_tiny_lm(self.run_dir / "model" / "base", corpus, shape)

    def _sft(
        self,
        model: Path,
        train: list[PromptItem],
        out: Path,
        heldout: list[PromptItem] | None = None,
        **budget: Any,
    ) -> Path:
        """SFT of ``model`` on ``train`` into ``out`` (the start, or the control;
        ``apps.pipeline.sft_phase``), recorded in the summary and the devices."""
        from rlvr_world.apps.pipeline.sft_phase import run_sft_phase

        result, epochs = run_sft_phase(
            self.cfg, self.placement, model, (train, heldout or []), out, log=self.log, **budget
        )
        name = out.name
        self.summary[f"{name}_s"] = result.seconds
        self.summary[f"{name}_steps"] = result.steps
        self.summary[f"{name}_epochs"] = epochs
        self.devices[name] = {"device": result.device, "precision": result.precision}
        return result.path

    # ------------------------------------------------------------------ evaluation

    async def _eval(
        self, rollout: str, addrs: Addresses, items: list[PromptItem]
    ) -> tuple[EvalReport, list[Answer]]:
        """Greedy answers of the model ``rollout`` serves, scored (``evaluate``)."""
        return await evaluate_served(
            rollout,
            addrs.decoder,
            addrs.reward,
            items,
            max_tokens=self.cfg.eval.max_tokens,
            variant=self.cfg.rl.reward_variant,
        )

    async def _eval_named(
        self, name: str, rollout: str, addrs: Addresses, test: list[PromptItem]
    ) -> None:
        report, answers = await self._eval(rollout, addrs, test)
        self.answers[name] = answers
        self.evals[name] = report.to_dict()
        with (self.run_dir / f"eval_{name}.jsonl").open("w") as fh:
            for a in answers:
                fh.write(json.dumps(asdict(a)) + "\n")
        self.log.write("eval", name=name, **report.to_dict())
        logger.info(
            "held-out %s: %s %.3f (n=%d)",
            name,
            self.metric.label,
            getattr(report, self.metric.report_key),
            report.n,
        )

    async def _curve(
        self, addrs: Addresses, redis: RedisHandle, items: list[PromptItem], done: asyncio.Event
    ) -> None:
        """A held-out point whenever the trainer has published ``eval.curve_every`` more steps."""
        every = self.cfg.eval.curve_every
        next_at = every
        while not done.is_set():
            if latest_version(redis.client) >= next_at:
                report, _ = await self._eval(addrs.rollout, addrs, items)
                point = {"step": report.policy_version, **report.to_dict()}
                self.curve.append(point)
                self.log.write("curve", **point)
                next_at = max(next_at + every, report.policy_version + every)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), timeout=1.0)

    # ------------------------------------------------------------------ GRPO

    async def _grpo(
        self,
        sup: Supervisor,
        addrs: Addresses,
        redis: RedisHandle,
        items: tuple[list[PromptItem], list[PromptItem]],
        trainer: ProcessSpec | None,
    ) -> RunStats:
        """The feed with the held-out curve; ``trainer``: launched beside the feed
        (``run_grpo``), None when it runs already."""
        train, test = items
        rl = self.cfg.rl
        orch = orchestrator_config(
            rl,
            seed=self.seed,
            max_tokens=rl.max_tokens,
            variant=rl.reward_variant,
            reward_type=rl.reward_type or "",
        )
        done = asyncio.Event()
        curve = None
        if self.cfg.eval.enabled and self.cfg.eval.curve_every:
            curve = asyncio.create_task(
                self._curve(addrs, redis, test[: self.cfg.eval.curve_items], done)
            )
        try:
            return await run_grpo(
                rl,
                orch,
                train,
                sup=sup,
                addrs=addrs,
                redis=redis,
                seed=self.seed,
                run_dir=self.run_dir,
                progress=self.cfg.run.progress,
                trainer=trainer,
                trainer_timeout_s=self.cfg.run.service_start_timeout_s,
            )
        finally:
            done.set()
            if curve is not None:
                await curve

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

    def _write_trainer_yaml(self, model: Path, redis_url: str) -> Path:
        r = self.cfg.run
        data = trainer_config(
            self.cfg.rl,
            model=model,
            redis_url=redis_url,
            trainer_dir=self.run_dir / "trainer",
            device=self.placement.device,
            precision=self.placement.precision,
            idle_timeout_s=r.trainer_idle_timeout_s,
            seed=self.seed,
            backend=self.cfg.model.backend,
        )
        path = self.run_dir / "trainer.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    async def _rlvr_phase(
        self,
        sup: Supervisor,
        addrs: Addresses,
        redis: RedisHandle,
        model: Path,
        items: tuple[list[PromptItem], list[PromptItem]],
        *,
        trainer: ProcessSpec | None = None,
    ) -> None:
        """GRPO until the trainer exits. ``trainer``: launched with the services already; None:
        started here, beside the feed or before it (``_trainer_start``)."""
        t1 = time.perf_counter()
        self.marks["grpo_start_s"] = time.time()
        if trainer is None:
            trainer = trainer_spec(self._write_trainer_yaml(model, redis.url))
            if self._trainer_start() == "before_feed":
                sup.start(trainer, timeout_s=self.cfg.run.service_start_timeout_s)
                trainer = None  # running and ready: the feed need not check it
        stats = await self._grpo(sup, addrs, redis, items, trainer)
        code = sup.get("trainer").popen.wait()
        self.summary["grpo_s"] = time.perf_counter() - t1
        final = latest_version(redis.client)
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

    # ------------------------------------------------------------------ control

    async def _control_phase(
        self,
        sup: Supervisor,
        addrs: Addresses,
        start: Path,
        items: tuple[list[PromptItem], list[PromptItem]],
    ) -> None:
        train, test = items
        trained = self.summary.get("trained_sequences", 0)
        grpo_steps = self.summary.get("trainer_steps", 0)
        budget = self.cfg.control.sft_budget(
            self.cfg.sft, self.summary.get("grpo_s", 0.0), trained, grpo_steps
        )
        rng = random.Random(self.seed + 1)
        order = list(train)
        rng.shuffle(order)
        control = self._sft(
            start, order, self.run_dir / "model" / "control", warmup_steps=0, **budget
        )
        self.summary["control_budget"] = {
            "kind": self.cfg.control.budget,
            **budget,
            "trained_sequences": trained,
            "grpo_steps": grpo_steps,
        }
        spec = rollout_spec(
            control,
            None,
            self._max_tokens(),
            name="rollout-control",
            engine=self.cfg.rollout,
            backend=self.cfg.model.backend,
            placement=self.placement,
        )
        sup.start(spec, timeout_s=self.cfg.run.service_start_timeout_s)
        await self._eval_named("control", spec.ready.address, addrs, test)  # type: ignore[union-attr]
        sup.stop("rollout-control")

    def _max_tokens(self) -> int:
        return max(self.cfg.rl.max_tokens, self.cfg.eval.max_tokens)

    # ------------------------------------------------------------------ the whole run

    def _trainer_start(self) -> TrainerStart:
        """When the trainer starts: with the services when nothing runs between them and the
        feed, else (after the start evaluation, which a waiting trainer could idle out through)
        beside the feed."""
        return "beside_feed" if self.cfg.eval.enabled else "with_services"

    async def _record_engine(self, addrs: Addresses) -> None:
        """The engine the rollout service reports (``Info``) into the summary and the log."""
        clients = ServiceClients(addrs.rollout, addrs.decoder, addrs.reward)
        try:
            info = await clients.engine_info()
        finally:
            await clients.close()
        self.summary["rollout_engine"] = info.engine
        self.log.write("rollout_engine", engine=info.engine, model=info.model)

    def _record_devices(self, sup: Supervisor) -> None:
        """Each process's logged device into ``summary["devices"]`` beside SFT's and the
        control's; the evaluations run on the rollout services (``evaluation``)."""
        self.devices.update(process_devices(sup))
        self.devices["evaluation"] = self.devices.get("rollout")
        self.summary["devices"] = self.devices
        self.log.write("devices", **self.devices)

    async def run_async(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        check_rollout_engine(self.cfg.rollout, self.cfg.model.path, self.placement.device)
        train, test, model = self.prepare()
        stack_t = time.time()
        redis = start_embedded(self.run_dir / "redis")
        self.marks["redis_s"] = time.time()
        redis_pid = {"redis": redis.embedded.pid} if redis.embedded and redis.embedded.pid else {}
        ev, r = self.cfg.eval, self.cfg.run
        try:
            with (
                Supervisor(self.run_dir) as sup,
                PeakRss(lambda: {**sup.pids(), **redis_pid}) as rss,
            ):
                trainer = None
                if self._trainer_start() == "with_services":
                    trainer = trainer_spec(self._write_trainer_yaml(model, redis.url))
                    ensure_local_token()  # as start_services does: the same token for everyone
                    sup.launch(trainer)
                addrs = start_services(
                    sup,
                    model=model,
                    redis_url=redis.url,
                    max_tokens=self._max_tokens(),
                    reward_workers=r.reward_workers,
                    timeout_s=r.service_start_timeout_s,
                    engine=self.cfg.rollout,
                    backend=self.cfg.model.backend,
                    placement=self.placement,
                )
                self.marks["services_s"] = time.time()
                self.log.write("services", **asdict(addrs))
                await self._record_engine(addrs)
                if ev.enabled:
                    await self._eval_named("start", addrs.rollout, addrs, test)
                await self._rlvr_phase(sup, addrs, redis, model, (train, test), trainer=trainer)
                self.marks["first_request_s"] = first_request_time(self.run_dir / "ledger.jsonl")
                self.summary["startup"] = startup_breakdown(sup, stack_t, **self.marks)
                self.log.write("startup", **self.summary["startup"])
                steps = train_steps(self.run_dir / "trainer" / "train_log.jsonl")
                self.summary["trained_sequences"] = int(
                    sum(s.get("samples_trained", 0) for s in steps)
                )
                if ev.enabled:
                    await self._eval_named("rlvr", addrs.rollout, addrs, test)
                if ev.enabled and self.cfg.control.enabled:
                    await self._control_phase(sup, addrs, model, (train, test))
                self._record_devices(sup)
            self.summary["peak_rss_mib"] = rss.summary()
        finally:
            redis.close()
        return self._finish(t0)

    def _finish(self, t0: float) -> dict[str, Any]:
        self.summary["wall_s"] = time.perf_counter() - t0
        self.summary["eval"] = self.evals
        self.summary["curve"] = self.curve
        steps = train_steps(self.run_dir / "trainer" / "train_log.jsonl")
        self.summary["train_reward"] = reward_trend(steps)
        if {"start", "control", "rlvr"} <= set(self.answers):
            self._headline()
        key = self.metric.report_key
        plot = plot_curve(steps, self.evals, self.curve, self.run_dir / "curve.png", key=key)
        write_report(self.run_dir, self.summary, self.evals, plot, label=self.metric.label)
        (self.run_dir / "summary.json").write_text(json.dumps(self.summary, indent=2))
        self.log.write(
            "end", **{k: v for k, v in self.summary.items() if k not in ("eval", "curve")}
        )
        self.log.close()
        return self.summary

    def _headline(self) -> None:
        """The headline and the no-change diagnostic into the summary
        (``results.headline_summary``)."""
        c = self.cfg
        variant = c.rl.reward_variant
        self.summary |= headline_summary(
            self.answers,
            always_no_change(self.test_items, lambda i: self.task.no_change_reward(i, variant)),
            seed=self.seed,
            budget=c.control.budget,
            metric=self.metric,
        )
        logger.info("%s", self.summary["headline_text"])


def run_pipeline(cfg: PipelineConfig, config_path: str = "") -> dict[str, Any]:
    """Run the pipeline (module docstring); returns the summary (also in ``summary.json``)."""
    return asyncio.run(PipelineRun(cfg, config_path).run_async())
