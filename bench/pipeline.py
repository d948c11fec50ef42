"""End-to-end GRPO samples/s: our pipeline (``rlvr-world run``) against TRL's ``GRPOTrainer``.

Both sides start from the same weights and train on the same prompts with the same settings:

* **Setup (not timed)**: ``configs/pipeline/bench.yaml`` (the README's kitchen_tiny model and
  game, lr 5e-5, KL 0.001, temperature 1) with the flags below; the pipeline's own
  ``prepare()`` builds the kitchen prompt items, the from-scratch tiny Llama and its tokenizer,
  and a short SFT warm-up (``--sft-epochs``, so the policy emits answers of realistic length;
  the short default rarely scores 1). That SFT directory is the start for both.
* **Ours**: ``PipelineRun.run_async`` (the exact code path of ``rlvr-world run``) with the
  held-out evaluations off: embedded Redis, reward / decoder / rollout services and the trainer
  as separate processes, the orchestrator in this process. Rollout (per prompt, G samples with a
  KV cache), decoding, scoring and training overlap; the trainer checkpoints every step and the
  rollout service reloads each version (samples may lag by ``max_staleness`` versions; stale
  groups are dropped by the trainer and their samples are not counted).
* **TRL**: ``trl.GRPOTrainer`` in this process, model given by path, ``use_vllm=False``, CPU,
  generation by ``model.generate`` on all P x G rows at once, then reward, then the step. The
  reward function scores in process with ``rlvr_world.rewards.dispatch.score_mapping`` (no service
  round trip: the cheaper, fairer baseline). GRPOConfig: ``num_generations=G``,
  ``per_device_train_batch_size=P*G`` (one generation batch per optimizer step, no gradient
  accumulation), ``max_completion_length``, temperature, beta 0.001 (k3 KL like ours),
  ``loss_type="bnpo"`` (token mean = ours), epsilon 0.2, constant lr, weight decay 0.01, grad
  clip 1.0, bf16 off, no logging, no saving, dataset not shuffled (the order ours draws).

Both use the strict text-game reward, ``binary`` (exact state diff); an unparseable answer is 0.
Timing: each side runs ``warmup + steps`` optimizer steps; wall-clock times of every step's end
come from the trainer's ``train_log.jsonl`` (ours) and a ``TrainerCallback`` (TRL). Samples are
trained samples (P x G per step); ours generates a few more groups that are not counted (in
flight at the end, or dropped as stale). Three windows, each ending at the last step's end:

* *steady*: the ``steps`` timed steps, from the end of the warm-up steps;
* *loop*: every step, from the first rollout request (ours: the ledger's first ``start``; TRL:
  the first ``on_step_begin``, before its first generation), start-up excluded;
* *total*: every step, from before any start-up (ours: Redis, reward / decoder / rollout
  services, trainer process; TRL: ``import trl``, model + reference load, trainer construction).

Start-up: ours launches the trainer with the services and feeds once the services are ready,
checking the trainer's readiness alongside; it runs a second time per repeat in the order
before (*old*: the trainer started after the services and ready before the first rollout
request; nothing else differs), and the medians of the run's start -> first rollout request
are printed with their ratio, against issue 20's target of 5 s, with where each second went
(Redis, each process's start and readiness from the run's ``summary.json``, the first request,
group and step) and the floor no ordering removes: a fresh interpreter importing the rollout
service and its engine (torch, safetensors, tokenizers, grpc: the tiny Llama runs on the
torch-only ``rlvr_world.llama`` in the rollout service and the trainer). ``--hf-backend`` adds a
run of ours with both on transformers' model classes (``model.backend: transformers``, how every
run started before that forward pass), in the same alternation.

``--vllm`` adds a run of ours with every rollout served by vLLM (``rollout.engine: vllm``, from
the vLLM environment of ``make vllm-setup``; KV cache ``--vllm-kv-cache-gib``), in the same
alternation and from the same SFT start, reported as its own row (*ours, vLLM rollout*) with its
rates, start-up (the vLLM service's start-up is in *total*) and peak RSS. The rollout service then
reloads each version through vLLM (``reload_weights``) instead of ``load_state_dict``.

Peak RSS (``rlvr_world.apps.memory``, Linux): ours is the sum of the per-process peaks of the
whole job (this process as the orchestrator, Redis, the services with their children, the
trainer), TRL the peak of this process; this process's peak is reset before each run, and its
RSS at that moment (its imports, the prepared data: part of both sides' figures) is printed.

Not equal, and said so in the output: ours spreads over several single-thread processes and so
uses both cores, while TRL runs one torch thread (``--trl-threads 1 2`` adds a TRL run on two
threads; on a 2-core machine shared with other work, two threads oversubscribe and TRL slows
down several times, so it is not the default); ours trains on samples up to
``--max-staleness`` policy versions old (clipped importance ratios against the behaviour
log-probs), TRL strictly on-policy; TRL generates all
P x G rows in one batched ``generate``, ours G rows per request, with the requests that wait
together generated in one batch by the rollout service (``--max-inflight``, default P: up to
a step's P x G rows; the vLLM engine takes one request at a time); ours checkpoints every step and
the rollout service reloads it, TRL saves nothing; ours scores through the reward service over
gRPC, TRL in process. The SFT warm-up is short, so rewards may all be 0 (zero advantages): both
sides still do the full forward/backward, so the cost per step is unchanged.

    python bench/pipeline.py [--steps 6] [--warmup 1] [--group-size 4] [--prompts-per-step 4]
                             [--max-tokens 96] [--max-staleness 2] [--max-inflight P]
                             [--trl-threads 1]
                             [--repeats 2] [--skip-old-order] [--keep DIR [--reuse-setup]]
                             [--vllm [--vllm-kv-cache-gib 0.25]]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import logging
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlvr_world.apps.memory import MIB, reset_own_peak, vm_hwm, vm_rss
from rlvr_world.apps.pipeline.config import PipelineConfig, load_pipeline_config
from rlvr_world.apps.pipeline.runner import PipelineRun, TrainerStart
from rlvr_world.apps.run.grpo import requests_forever
from rlvr_world.apps.run.stack import check_rollout_engine
from rlvr_world.items import PromptItem, load_items
from rlvr_world.queue.server import URL_FILENAME
from rlvr_world.runlog import read_jsonl

ROOT = Path(__file__).resolve().parent.parent
BASE_CONFIG = ROOT / "configs" / "pipeline" / "bench.yaml"
#: Issue 20's start-up target: the run's start to the first rollout request.
STARTUP_TARGET_S = 5.0
VARIANT, REWARD_TYPE = "strict", "binary"


@dataclass
class Side:
    """What one side did: the wall-clock end of each step and per-step numbers."""

    name: str
    start: float  # before any start-up
    step_ends: list[float]
    loop_start: float = 0.0  # the first rollout request (after start-up)
    rewards: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    peak_rss_mib: float | None = None  # the job's sum of per-process peaks (``apps.memory``)
    base_rss_mib: float = 0.0  # this bench process's RSS when the run started
    phase_to_request: float | None = None  # ours: GRPO phase start -> first rollout request


@dataclass(frozen=True)
class Prepared:
    train: list[PromptItem]
    test: list[PromptItem]
    model: Path


def pipeline_config(
    args: argparse.Namespace, run_dir: Path, *, vllm: bool = False, hf: bool = False
) -> PipelineConfig:
    """``bench.yaml`` with this bench's sizes (evaluations off there); ``vllm``: every rollout
    served by vLLM (``--vllm``); ``hf``: on transformers' model classes (``--hf-backend``)."""
    p, g = args.prompts_per_step, args.group_size
    engine: dict[str, Any] = {"model.backend": "transformers"} if hf else {}
    if vllm:
        engine = {
            "rollout.engine": "vllm",
            "rollout.kv_cache_gib": args.vllm_kv_cache_gib,
            "run.service_start_timeout_s": 600.0,
        }
    return load_pipeline_config(
        BASE_CONFIG,
        {
            **engine,
            "rl.group_size": g,
            "rl.groups_per_step": p,
            "rl.steps": args.warmup + args.steps,
            "rl.micro_batch_size": p * g,  # one backward per step, as TRL's batch
            "rl.max_tokens": args.max_tokens,
            "rl.max_staleness": args.max_staleness,
            "rl.max_inflight": args.max_inflight or p,
            "rl.reward_variant": VARIANT,
            "rl.reward_type": REWARD_TYPE,
            "sft.epochs": args.sft_epochs,
            "data.max_train": args.train_prompts,
            "eval.enabled": False,
            "run.run_dir": str(run_dir),
            "run.progress": False,
        },
    )


def prepare(cfg: PipelineConfig, reuse: bool) -> Prepared:
    """Items, tiny model and SFT through the pipeline's own ``prepare`` (not timed).

    ``reuse``: take the items and SFT weights an earlier run left in the same directory."""
    run_dir = cfg.run.run_dir
    sft = run_dir / "model" / "sft"
    if reuse and (sft / "config.json").exists():
        data = run_dir / "data"
        return Prepared(load_items(data / "train.jsonl"), load_items(data / "test.jsonl"), sft)
    run = PipelineRun(cfg, "bench-prepare")
    train, test, model = run.prepare()
    run.log.close()
    return Prepared(train, test, model)


class _PreparedRun(PipelineRun):
    """``rlvr-world run`` reusing the prepared items and SFT weights (the rest is unchanged)."""

    def __init__(self, cfg: PipelineConfig, prepared: Prepared) -> None:
        super().__init__(cfg, "bench")
        self._prepared = prepared

    def prepare(self) -> tuple[list[PromptItem], list[PromptItem], Path]:
        p = self._prepared
        return p.train, p.test, p.model


def stop_leftover_redis(run_dir: Path) -> bool:
    """Shut down the run's embedded Redis if it outlived the run; True when it had to."""
    import redis

    url_file = run_dir / "redis" / URL_FILENAME
    if not url_file.exists():
        return False
    client = redis.Redis.from_url(url_file.read_text().strip())
    try:
        client.ping()
    except (redis.ConnectionError, OSError):
        return False
    client.shutdown(nosave=True)  # bench data only; the directory is deleted next
    return True


class _OrderedRun(_PreparedRun):
    """The same run with the trainer started another way (``PipelineRun._trainer_start``):
    *before_feed*, the order before (the trainer started after the services and waited for
    before the first rollout request: the baseline of the start-up ratio), or *beside_feed*
    (started after the services, the feed not waiting for it). Nothing else differs."""

    def __init__(self, cfg: PipelineConfig, prepared: Prepared, start: TrainerStart) -> None:
        super().__init__(cfg, prepared)
        self._start = start

    def _trainer_start(self) -> TrainerStart:
        return self._start


OURS = "ours (rlvr-world run)"
VLLM = "ours, vLLM rollout"
HF = "ours on transformers' model classes"
ORDERS: dict[TrainerStart, str] = {
    "before_feed": "ours, trainer first (old)",
    "beside_feed": "ours, trainer beside feed",
}


def fresh_peak() -> tuple[bool, float]:
    """Collect garbage and reset this process's peak RSS; (reset done, RSS now in MiB)."""
    gc.collect()
    done = reset_own_peak()
    return done, (vm_rss("self") or 0) / MIB


def run_ours(
    cfg: PipelineConfig,
    prepared: Prepared,
    order: TrainerStart | None = None,
    name: str | None = None,
) -> Side:
    reset, base_mib = fresh_peak()
    start = time.time()
    run = _PreparedRun(cfg, prepared) if order is None else _OrderedRun(cfg, prepared, order)
    summary = asyncio.run(run.run_async())
    run_dir = cfg.run.run_dir
    leaked = stop_leftover_redis(run_dir)
    steps = [e for e in read_jsonl(run_dir / "trainer" / "train_log.jsonl") if e["event"] == "step"]
    drops = [e for e in read_jsonl(run_dir / "trainer" / "train_log.jsonl") if e["event"] == "drop"]
    ledger = read_jsonl(run_dir / "ledger.jsonl")
    first_push = min(e["time"] for e in ledger if e["event"] == "pushed")
    side = Side(
        name or (OURS if order is None else ORDERS[order]),
        start,
        [float(e["time"]) for e in steps],
        loop_start=min(float(e["time"]) for e in ledger if e["event"] == "start"),
        rewards=[float(e["reward_mean"]) for e in steps],
        tokens=[int(e["tokens"]) for e in steps],
    )
    rss = summary.get("peak_rss_mib", {})
    side.peak_rss_mib, side.base_rss_mib = rss.get("total"), base_mib
    side.phase_to_request = (
        summary["startup"]["first_request_s"] - summary["startup"]["grpo_start_s"]
    )
    compute = statistics.fmean(float(e["seconds"]) for e in steps)
    reasons = ", ".join(sorted({d["reason"] for d in drops})) or "-"
    versions = [e["policy_version"] for e in ledger if e["event"] == "pushed"]
    side.notes += [
        f"{side.name}: {summary['pushed']} groups generated, scored and pushed "
        f"({summary['failed']} failed: the ones in flight when the trainer stopped), "
        f"{len(drops)} dropped by the trainer ({reasons}); pushed groups' policy versions "
        f"{versions}",
        f"{side.name}: trainer step compute {compute:.2f} s/step on average, process wall "
        f"incl. shutdown {time.time() - start:.1f} s"
        + ("; its embedded Redis outlived the run (shut down here)" if leaked else ""),
        f"{side.name}: " + startup_line(summary["startup"], start, side, first_push, steps),
        f"{side.name}: peak RSS MiB by process {rss}"
        + (f" (orchestrator = this bench process, {base_mib:.0f} MiB before the run)")
        + ("" if reset else "; its peak could not be reset: it includes earlier runs"),
    ]
    return side


def startup_line(
    up: dict[str, Any], start: float, side: Side, first_push: float, steps: list[dict[str, Any]]
) -> str:
    """Where the start-up's seconds went, from the run's start (``start``): Redis, each
    process's start and readiness, the GRPO phase, the first request, group and step."""
    offset = side.loop_start - start - up["first_request_s"]  # the stack's start in the run
    parts = [f"Redis {up['redis_s'] + offset:.2f}"]
    for name, p in up["processes"].items():
        ready = "-" if p["ready_s"] is None else f"{p['ready_s'] + offset:.2f}"
        parts.append(f"{name} {p['started_s'] + offset:.2f}->{ready}")
    parts += [
        f"services ready {up['services_s'] + offset:.2f}",
        f"GRPO phase {up['grpo_start_s'] + offset:.2f}",
        f"first rollout request {side.loop_start - start:.2f}",
        f"first group pushed {first_push - start:.2f}",
        f"first step done {float(steps[0]['time']) - start:.2f}",
    ]
    return "start-up, s from the run's start (process started->ready): " + ", ".join(parts)


def _dataset_rows(train: list[PromptItem], seed: int, count: int) -> list[PromptItem]:
    """The first ``count`` requests in the order ours draws them."""
    return [item for _, item in itertools.islice(requests_forever(train, seed), count)]


def run_trl(cfg: PipelineConfig, prepared: Prepared, threads: int, out: Path) -> Side:
    torch.set_num_threads(threads)
    rl = cfg.rl
    total_steps = rl.steps
    reset, base_mib = fresh_peak()
    start = time.time()
    from datasets import Dataset  # type: ignore[import-untyped]
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

    from rlvr_world.rewards.dispatch import score_mapping
    from rlvr_world.rewards.types import Status

    rows = _dataset_rows(prepared.train, cfg.run.seed, rl.groups_per_step * total_steps)
    by_id = {item.prompt_id: item for item in prepared.train}
    side = Side(f"TRL GRPOTrainer ({threads} thread)", start, [])
    batch_rewards: list[float] = []
    batch_tokens: list[int] = []

    def reward(
        completions: list[str], prompt_id: list[str], completion_ids: list[list[int]], **_: Any
    ) -> list[float | None]:
        out_: list[float | None] = []
        for text, pid in zip(completions, prompt_id, strict=True):
            row = by_id[pid].reward_row(text)
            row["variant"], row["reward_type"] = VARIANT, REWARD_TYPE
            result = score_mapping(row)
            if result.status is Status.OK:
                out_.append(result.reward)
            elif result.status is Status.UNPARSEABLE:
                out_.append(0.0)  # ours: grpo.unparseable_reward = 0
            else:
                out_.append(None)
        batch_rewards.append(statistics.fmean(r or 0.0 for r in out_))
        batch_tokens.append(sum(len(c) for c in completion_ids))
        return out_

    class Timer(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            side.loop_start = side.loop_start or time.time()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            side.step_ends.append(time.time())

    targs = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=rl.groups_per_step * rl.group_size,
        gradient_accumulation_steps=1,
        num_generations=rl.group_size,
        max_completion_length=rl.max_tokens,
        temperature=rl.temperature,
        top_p=1.0,
        top_k=0,
        beta=rl.kl_coef,
        loss_type="bnpo",
        epsilon=0.2,
        learning_rate=rl.lr,
        lr_scheduler_type="constant",
        weight_decay=0.01,
        max_grad_norm=1.0,
        max_steps=total_steps,
        num_iterations=1,
        use_vllm=False,
        use_cpu=True,
        bf16=False,
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        disable_tqdm=True,
        shuffle_dataset=False,
        dataloader_num_workers=0,
        seed=cfg.run.seed,
    )
    trainer = GRPOTrainer(
        model=str(prepared.model),
        reward_funcs=[reward],
        args=targs,
        train_dataset=Dataset.from_dict(
            {"prompt": [i.prompt for i in rows], "prompt_id": [i.prompt_id for i in rows]}
        ),
        processing_class=AutoTokenizer.from_pretrained(str(prepared.model)),
        callbacks=[Timer()],
    )
    trainer.remove_callback(PrinterCallback)  # its end-of-training metrics dict
    trainer.train()
    peak = vm_hwm("self")
    side.peak_rss_mib = None if peak is None else round(peak / MIB, 1)
    side.base_rss_mib = base_mib
    torch.set_num_threads(1)
    side.rewards, side.tokens = batch_rewards, batch_tokens
    side.notes += [
        f"{side.name}: start-up (import trl, load model + reference, build trainer) "
        f"{side.loop_start - start:.1f} s",
        f"{side.name}: peak RSS {side.peak_rss_mib} MiB (this bench process, "
        f"{base_mib:.0f} MiB before the run)"
        + ("" if reset else "; its peak could not be reset: it includes earlier runs"),
    ]
    return side


WINDOWS = ("steady", "loop", "total")
CAVEATS = (
    "not equal: ours uses both cores (one thread per process), TRL one thread unless 2 is listed",
    "not equal: ours trains on samples up to max_staleness versions old, TRL on-policy",
    "not equal: TRL generates P x G rows in one batch, ours G rows per request, the waiting "
    "requests joined (transformers engine; up to --max-inflight prompts)",
    "not equal: ours checkpoints every step and reloads rollout weights, scores over gRPC; "
    "TRL saves nothing and scores in process (favours TRL)",
)


def rates(side: Side, warmup: int, per_step: int) -> dict[str, tuple[float, float]]:
    """``window -> (seconds, trained samples/s)`` (module docstring)."""
    ends, n = side.step_ends, len(side.step_ends)
    steady_from = ends[warmup - 1] if warmup > 0 else side.loop_start
    spans = {
        "steady": (ends[-1] - steady_from, n - warmup),
        "loop": (ends[-1] - side.loop_start, n),
        "total": (ends[-1] - side.start, n),
    }
    return {k: (sec, steps * per_step / sec) for k, (sec, steps) in spans.items()}


def report(runs: list[Side], args: argparse.Namespace) -> None:
    """One row per run; ratios of each side's best rate per window (best of ``--repeats``)."""
    per_step = args.prompts_per_step * args.group_size
    print(
        f"kitchen_tiny model, {args.prompts_per_step} prompts x G={args.group_size} = {per_step} "
        f"samples per step, max {args.max_tokens} new tokens, temperature 1, strict binary "
        f"reward, {args.warmup} warm-up + {args.steps} timed steps, ours with max_staleness "
        f"{args.max_staleness}, CPU, "
        f"{args.repeats} alternating repeat(s)"
    )
    print(
        f"{'run':<32} {'tok/sample':>10} {'reward':>7}"
        + "".join(f" {w + ' s':>9} {w + ' sam/s':>13}" for w in WINDOWS)
    )
    best: dict[str, dict[str, float]] = {}
    for index, s in enumerate(runs):
        if len(s.step_ends) != args.warmup + args.steps:
            raise RuntimeError(
                f"{s.name}: {len(s.step_ends)} steps, not {args.warmup + args.steps}"
            )
        r = rates(s, args.warmup, per_step)
        side = best.setdefault(s.name, dict.fromkeys(WINDOWS, 0.0))
        for w in WINDOWS:
            side[w] = max(side[w], r[w][1])
        tok = sum(s.tokens) / max(1, len(s.tokens) * per_step)
        rew = statistics.fmean(s.rewards) if s.rewards else float("nan")
        print(
            f"{s.name + ' #' + str(index // len({x.name for x in runs}) + 1):<32} "
            f"{tok:>10.1f} {rew:>7.3f}"
            + "".join(f" {r[w][0]:>9.1f} {r[w][1]:>13.2f}" for w in WINDOWS)
        )
    names = list(best)
    ours = best[names[0]]
    for name in names[1:]:
        ratios = ", ".join(f"{w} {ours[w] / best[name][w]:.2f}x" for w in WINDOWS)
        print(f"ratio ours / {name} (best rates): {ratios}")
    for s in runs:
        for note in s.notes:
            print(note)
    for caveat in CAVEATS:
        print(caveat)


def import_floor() -> float:
    """Seconds a fresh interpreter takes to import the rollout service and engine (torch,
    safetensors, tokenizers, grpc): the floor of its start-up, which no ordering removes."""
    t0 = time.perf_counter()
    code = "import services.rollout.server, services.rollout.transformers_engine"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    return time.perf_counter() - t0


def report_startup_and_memory(runs: list[Side], floors: list[float]) -> None:
    """Start-up medians (ours against the old order) and peak RSS medians (ours against TRL)."""
    by_name: dict[str, list[Side]] = {}
    for side in runs:
        by_name.setdefault(side.name, []).append(side)
    med = statistics.median
    ours = med(s.loop_start - s.start for s in by_name[OURS])
    phase = med(s.phase_to_request or 0.0 for s in by_name[OURS])
    verdict = "met" if ours <= STARTUP_TARGET_S else "not met"
    print(
        f"start-up, the run's start (Redis, services) -> first rollout request, median: ours "
        f"{ours:.2f} s (target <= {STARTUP_TARGET_S:.0f} s: {verdict}); the GRPO phase's start "
        f"-> first rollout request: ours {phase:.2f} s"
    )
    ours_step = med(s.step_ends[0] - s.start for s in by_name[OURS])
    print(f"first step done, median: ours {ours_step:.2f} s from the run's start")
    for name in [*ORDERS.values(), VLLM, HF]:
        if name in by_name:
            other = med(s.loop_start - s.start for s in by_name[name])
            first_step = med(s.step_ends[0] - s.start for s in by_name[name])
            print(
                f"start-up, {name}: first request {other:.2f} s, first step done "
                f"{first_step:.2f} s; {name} / ours (first request) {other / ours:.2f}x"
            )
    print(
        f"a fresh interpreter importing the rollout service and engine (torch, safetensors, "
        f"tokenizers, grpc), median: "
        f"{med(floors):.2f} s: the floor of the rollout service's start, and so of ours"
    )
    for name, sides in by_name.items():
        peaks = [s.peak_rss_mib for s in sides if s.peak_rss_mib is not None]
        if peaks:
            print(f"peak RSS, {name}: median {med(peaks):.0f} MiB (all: {peaks})")
    trl = [n for n in by_name if n not in (OURS, VLLM, HF, *ORDERS.values())]
    ours_peaks = [s.peak_rss_mib for s in by_name[OURS] if s.peak_rss_mib is not None]
    ours_more = [s.peak_rss_mib - s.base_rss_mib for s in by_name[OURS] if s.peak_rss_mib]
    for name in trl:
        theirs = [s.peak_rss_mib for s in by_name[name] if s.peak_rss_mib is not None]
        more = [s.peak_rss_mib - s.base_rss_mib for s in by_name[name] if s.peak_rss_mib]
        if ours_peaks and theirs:
            print(
                f"peak RSS ratio ours (sum of per-process peaks) / {name}: "
                f"{med(ours_peaks) / med(theirs):.2f}x; above this bench process's RSS at the "
                f"run's start (its imports of torch and transformers, the prepared data: in "
                f"both sides' figures): ours {med(ours_more):.0f} MiB, {name} {med(more):.0f} "
                f"MiB (TRL's imports are in that base; ours' services and trainer pay their own)"
            )


def one_repeat(args: argparse.Namespace, root: Path, prepared: Prepared) -> list[Side]:
    """One run of each side asked for, in a fixed order."""
    trl_dirs = [f"trl{t}" for t in args.trl_threads]
    for name in ["ours", "old", "beside", "vllm", "hf", *trl_dirs]:
        shutil.rmtree(root / name, ignore_errors=True)
    runs = [run_ours(pipeline_config(args, root / "ours"), prepared)]
    if not args.skip_old_order:
        runs.append(run_ours(pipeline_config(args, root / "old"), prepared, "before_feed"))
    if args.beside_feed:
        runs.append(run_ours(pipeline_config(args, root / "beside"), prepared, "beside_feed"))
    if args.vllm:
        cfg = pipeline_config(args, root / "vllm", vllm=True)
        runs.append(run_ours(cfg, prepared, name=VLLM))
    if args.hf_backend:
        runs.append(run_ours(pipeline_config(args, root / "hf", hf=True), prepared, name=HF))
    for threads in args.trl_threads:
        cfg = pipeline_config(args, root / f"trl{threads}")
        runs.append(run_trl(cfg, prepared, threads, root / f"trl{threads}"))
    return runs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=6, help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first (steady rate)")
    p.add_argument("--group-size", type=int, default=4, help="samples per prompt (G)")
    p.add_argument("--prompts-per-step", type=int, default=4, help="prompts per optimizer step")
    p.add_argument("--max-tokens", type=int, default=96, help="max new tokens per sample")
    p.add_argument(
        "--max-staleness", type=int, default=2, help="ours: policy versions samples may lag"
    )
    p.add_argument(
        "--max-inflight",
        type=int,
        default=0,
        help="ours: prompts in flight (0: --prompts-per-step, so a step's prompts are generated "
        "together by the rollout's batching)",
    )
    p.add_argument("--sft-epochs", type=int, default=1, help="SFT warm-up epochs (setup)")
    p.add_argument("--train-prompts", type=int, default=160, help="train prompts (SFT + RL)")
    p.add_argument(
        "--trl-threads", type=int, nargs="+", default=[1], help="torch threads for TRL runs"
    )
    p.add_argument("--repeats", type=int, default=2, help="alternating runs of each side")
    p.add_argument(
        "--beside-feed",
        action="store_true",
        help="also a run with the trainer started after the services, beside the feed",
    )
    p.add_argument(
        "--skip-old-order",
        action="store_true",
        help="no run in the old start-up order (trainer ready before the first request)",
    )
    p.add_argument(
        "--vllm",
        action="store_true",
        help="also a run of ours with vLLM rollouts (make vllm-setup; RLVR_VLLM_PYTHON)",
    )
    p.add_argument(
        "--vllm-kv-cache-gib", type=float, default=0.25, help="--vllm: the rollout's KV cache"
    )
    p.add_argument(
        "--hf-backend",
        action="store_true",
        help="also a run of ours with the rollout and the trainer on transformers' model classes "
        "(as before the torch-only Llama: model.backend transformers)",
    )
    p.add_argument("--keep", type=Path, default=None, help="keep run dirs here (default: temp)")
    p.add_argument(
        "--reuse-setup", action="store_true", help="with --keep: reuse its items and SFT weights"
    )
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        if args.vllm:  # refused before the setup: no vLLM environment, a head size vLLM refuses
            check_rollout_engine(pipeline_config(args, root / "vllm", vllm=True).rollout)
        t0 = time.perf_counter()
        prepared = prepare(pipeline_config(args, root / "prepare"), args.reuse_setup)
        print(f"setup (items, tiny model, SFT): {time.perf_counter() - t0:.1f} s")
        runs: list[Side] = []
        floors: list[float] = []
        for _ in range(args.repeats):  # alternate, so load drift hits both sides alike
            floors.append(import_floor())
            runs += one_repeat(args, root, prepared)
        report(runs, args)
        report_startup_and_memory(runs, floors)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
