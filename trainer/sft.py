"""SFT warm-up: maximum likelihood of target answers given prompts, before RLVR (as the paper does).

Each example is ``<bos> prompt target <eos>`` (the prompt tokenized exactly as the rollout service
tokenizes it, with the tokenizer's special tokens; the target without them). The loss is the mean
cross-entropy over target tokens only (prompt positions are masked with -100). AdamW at a constant
learning rate after a linear warm-up, gradient clipping, shuffled mini-batches for a few epochs,
or until a step or time budget (``max_steps``, ``max_seconds``) is spent: the MLE control of a
GRPO run continues SFT for GRPO's budget.

``share_prompts``: examples whose prompts differ only in their last line (a text-game or web
transition's action line: one state, several actions) form a group; every epoch each group is
shuffled and cut into chunks of at most ``group_rows`` rows, and a step takes shuffled chunks
until it has ``batch_size`` rows. The tokens a chunk's examples have in common (their longest
common token prefix: the state) run once per step, their KV cache continued by each example's
own tokens (``trainer.model.response_logits``, as a GRPO group's prompt does). The loss is the
same mean over target tokens, the same up to float rounding; what changes is which examples
share a step (``bench/sft_sharing.py`` times it; docs/rl.md says how it trained).

``device`` and ``precision`` (``rlvr_world.devices``): the model and every batch go to the
device; with ``bf16`` the forward passes run under bf16 autocast (weights, gradients and AdamW
state stay float32; the loss is taken in float32). Given held-out pairs (``heldout``), the mean
target loss over their target tokens (no gradients, eval mode) is measured after every epoch
beside the train loss (the mean of the epoch's step losses), so a run can show that SFT
converged; held-out examples longer than ``max_length`` are left out and counted.

The result is a directory in the layout the trainer and the rollout service read
(``save_pretrained`` safetensors + the tokenizer), so GRPO starts from it (``model.path``) and
the rollout serves it (``--model``). Not a general fine-tuning library: no packing, no LoRA, no
early stopping. The examples, the batches and the losses are ``trainer.sft_data``.

``python -m trainer.sft --model DIR --items train.jsonl --out DIR [--epochs 3 --lr 1e-3]``
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from rlvr_world.devices import (
    DeviceName,
    PrecisionName,
    TorchThreads,
    autocast,
    device_line,
    resolve_device,
    resolve_precision,
)
from trainer.sft_data import (
    IGNORE,
    Example,
    collate,
    encode,
    heldout_examples,
    heldout_loss,
    target_loss,
)

logger = logging.getLogger(__name__)


class SftConfig(BaseModel):
    """Hyper-parameters of the warm-up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epochs: int = Field(default=3, ge=1, le=10_000, description="passes over the examples")
    lr: float = Field(default=1e-3, gt=0.0, le=1.0, description="peak AdamW learning rate")
    warmup_steps: int = Field(default=20, ge=0, le=1_000_000, description="linear warm-up steps")
    schedule: Literal["constant", "cosine"] = Field(
        default="constant",
        description="after the warm-up: constant, or cosine decay to 0 over the epochs",
    )
    weight_decay: float = Field(default=0.0, ge=0.0, le=1.0, description="AdamW weight decay")
    batch_size: int = Field(default=8, ge=1, le=4096, description="examples per step")
    grad_clip: float = Field(default=1.0, gt=0.0, le=1e6, description="max global grad norm")
    max_length: int = Field(default=1024, ge=8, le=1_000_000, description="longest example")
    seed: int = Field(default=0, ge=0, description="shuffle and init seed")
    torch_threads: TorchThreads = 1
    max_steps: int | None = Field(
        default=None, ge=1, le=100_000_000, description="stop after this many steps (a budget)"
    )
    max_seconds: float | None = Field(
        default=None, gt=0.0, le=1e7, description="stop after this much training time (a budget)"
    )
    share_prompts: bool = Field(
        default=False,
        description="batch examples whose prompts differ only in the last line together and "
        "run their common token prefix once per step (module docstring)",
    )
    group_rows: int = Field(
        default=0,
        ge=0,
        le=4096,
        description="share_prompts: most rows of one prompt group in a step, so a step mixes "
        "batch_size / group_rows groups (0: up to batch_size rows of one group)",
    )
    device: DeviceName = Field(
        default="auto", description="auto (CUDA where there is a GPU), cpu, cuda or cuda:N"
    )
    precision: PrecisionName = Field(
        default="auto", description="auto (bf16 on a CUDA device that supports it), fp32, bf16"
    )


@dataclass
class SftResult:
    """Where the model went, how the loss moved, and where it trained."""

    path: Path
    steps: int = 0
    seconds: float = 0.0  # training time (the held-out passes not included)
    losses: list[float] = field(default_factory=list)  # mean train loss per epoch
    heldout_losses: list[float] = field(default_factory=list)  # per epoch, with held-out pairs
    heldout_left_out: int = 0  # held-out examples longer than max_length
    device: str = "cpu"  # the device the model trained on
    precision: str = "fp32"  # fp32 or bf16 (autocast)


def prompt_groups(pairs: Sequence[tuple[str, str]]) -> list[list[int]]:
    """Indices of the examples whose prompts are the same but for their last line, in first-seen
    order (``share_prompts``)."""
    groups: dict[str, list[int]] = {}
    for i, (prompt, _) in enumerate(pairs):
        head, _, _ = prompt.rstrip("\n").rpartition("\n")
        groups.setdefault(head, []).append(i)
    return list(groups.values())


def group_batches(
    groups: Sequence[Sequence[int]], batch_size: int, rng: random.Random, group_rows: int = 0
) -> list[list[list[int]]]:
    """One epoch's steps, each a list of chunks (example indices of one prompt group): every
    group is shuffled and cut into chunks of at most ``group_rows`` rows (0: ``batch_size``),
    the chunks are shuffled and joined until a step has at least ``batch_size`` rows."""
    size = group_rows or batch_size
    chunks: list[list[int]] = []
    for g in groups:
        members = list(g)
        rng.shuffle(members)
        chunks.extend(members[i : i + size] for i in range(0, len(members), size))
    rng.shuffle(chunks)
    batches: list[list[list[int]]] = []
    current: list[list[int]] = []
    rows = 0
    for chunk in chunks:
        current.append(chunk)
        rows += len(chunk)
        if rows >= batch_size:
            batches.append(current)
            current, rows = [], 0
    if current:
        batches.append(current)
    return batches


def _prompt_len(e: Example) -> int:
    return next(i for i, t in enumerate(e.labels) if t != IGNORE)


def _common_prefix(rows: Sequence[Example]) -> int:
    """Tokens every row starts with, up to the shortest prompt (never into a target)."""
    first = rows[0].input_ids
    n = min(_prompt_len(e) for e in rows)
    for e in rows[1:]:
        k = 0
        while k < n and e.input_ids[k] == first[k]:
            k += 1
        n = k
    return n


def shared_target_loss(
    model: torch.nn.Module, batch: Sequence[Example], groups: Sequence[Sequence[int]]
) -> torch.Tensor:
    """``target_loss`` of ``batch`` where the rows of each group (indices into ``batch``) run
    their common token prefix once: each row becomes a sample whose prompt is that prefix and
    whose response is the rest, the action's tokens masked out, packed and run by the trainer's
    shared-prompt path (``trainer.model.pack`` / ``response_logits``; it falls back to full rows
    when sharing would not save work). A group of one shares its own prompt."""
    from rlvr_world.grpo.groups import TrainSample
    from trainer.model import pack, response_logits

    samples = []
    for g in groups:
        p = _common_prefix([batch[i] for i in g])
        if p < 1:
            raise ValueError("shared_target_loss: a group's rows have no common first token")
        for i in g:
            e = batch[i]
            rest = tuple(e.input_ids[p:])
            samples.append(
                TrainSample(
                    group_id=str(id(g)),
                    prompt_token_ids=tuple(e.input_ids[:p]),
                    token_ids=rest,
                    behaviour_logprobs=(0.0,) * len(rest),
                    reward=0.0,
                    advantage=0.0,
                    loss_mask=tuple(int(t != IGNORE) for t in e.labels[p:]),
                )
            )
    packed = pack(samples, next(model.parameters()).device)
    logits = response_logits(model, packed, 1.0)
    labels = packed.response_ids.masked_fill(packed.response_mask == 0, IGNORE)
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE
    )


def _epoch_steps(
    n: int, groups: list[list[int]] | None, cfg: SftConfig, rng: random.Random
) -> list[list[list[int]]]:
    """One epoch's steps as lists of chunks: prompt groups (``group_batches``) when sharing,
    else one chunk of ``batch_size`` shuffled examples per step."""
    if groups is not None:
        return group_batches(groups, cfg.batch_size, rng, cfg.group_rows)
    order = list(range(n))
    rng.shuffle(order)
    return [[order[i : i + cfg.batch_size]] for i in range(0, n, cfg.batch_size)]


def _step_loss(
    model: torch.nn.Module,
    examples: Sequence[Example],
    step: Sequence[Sequence[int]],
    *,
    shared: bool,
    pad: int,
) -> torch.Tensor:
    """The mean target loss of one step's chunks (each chunk's prompt shared when ``shared``)."""
    if not shared:
        device = next(model.parameters()).device
        rows = collate([examples[i] for c in step for i in c], pad)
        return target_loss(model, *(t.to(device) for t in rows))
    batch: list[Example] = []
    local: list[list[int]] = []
    for chunk in step:
        local.append(list(range(len(batch), len(batch) + len(chunk))))
        batch.extend(examples[i] for i in chunk)
    return shared_target_loss(model, batch, local)


def _spent(result: SftResult, cfg: SftConfig, t0: float) -> bool:
    """Whether the step or time budget (when set) is used up."""
    if cfg.max_steps is not None and result.steps >= cfg.max_steps:
        return True
    return cfg.max_seconds is not None and time.perf_counter() - t0 >= cfg.max_seconds


def _lr_at(step: int, cfg: SftConfig, total: int) -> float:
    """Linear warm-up over ``warmup_steps``, then constant or cosine decay to 0 at ``total``."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(total - cfg.warmup_steps, 1)
    done = min(max(step - cfg.warmup_steps, 0), span)
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * done / span))


@dataclass(frozen=True)
class _Loop:
    """What every step of one SFT run shares."""

    cfg: SftConfig
    shared: bool
    pad: int
    device: str
    precision: str
    total_steps: int


def _train_epoch(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    examples: Sequence[Example],
    steps: Sequence[Sequence[Sequence[int]]],
    *,
    result: SftResult,
    t0: float,
    ctx: _Loop,
) -> tuple[float, int]:
    """Train on one epoch's ``steps`` until they or the budget run out; the sum of the step
    losses and the number of steps taken (``result.steps`` counts on)."""
    total, batches = 0.0, 0
    for step in steps:
        if _spent(result, ctx.cfg, t0):
            break
        for group in opt.param_groups:
            group["lr"] = _lr_at(result.steps, ctx.cfg, ctx.total_steps)
        with autocast(ctx.device, ctx.precision):
            loss = _step_loss(model, examples, step, shared=ctx.shared, pad=ctx.pad)
        opt.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)  # Tensor.backward is unannotated
        torch.nn.utils.clip_grad_norm_(model.parameters(), ctx.cfg.grad_clip)
        opt.step()
        result.steps += 1
        total, batches = total + float(loss.detach()), batches + 1
    return total, batches


#: ``on_epoch(epoch, train_loss, heldout_loss)``; the held-out loss is None without held-out pairs.
EpochHook = Callable[[int, float, float | None], None]


def run_sft(
    model_dir: Path,
    pairs: Sequence[tuple[str, str]],
    out_dir: Path,
    cfg: SftConfig,
    on_epoch: EpochHook | None = None,
    *,
    heldout: Sequence[tuple[str, str]] = (),
) -> SftResult:
    """Fine-tune the model in ``model_dir`` on ``(prompt, target)`` pairs; save to ``out_dir``.
    ``heldout``: pairs whose loss is measured after every epoch (module docstring)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not pairs:
        raise ValueError("sft: no examples")
    device = resolve_device(cfg.device, "sft device")
    precision = resolve_precision(cfg.precision, device)
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.torch_threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.to(device)  # type: ignore[arg-type]  # transformers' @wraps(Module.to) drops self
    model.train()
    logger.info("sft: %s", device_line(device, precision))
    examples = [encode(tokenizer, p, t, cfg.max_length) for p, t in pairs]
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    held, left_out = heldout_examples(tokenizer, heldout, cfg.max_length)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = random.Random(cfg.seed)
    result = SftResult(path=out_dir, device=device, precision=precision, heldout_left_out=left_out)
    groups = prompt_groups(pairs) if cfg.share_prompts else None
    # Steps per epoch: shared steps take whole groups, so their count varies by a step or two
    # between epochs; the first epoch's count sets the cosine schedule's length.
    per_epoch = (
        len(group_batches(groups, cfg.batch_size, random.Random(cfg.seed), cfg.group_rows))
        if groups is not None
        else math.ceil(len(examples) / cfg.batch_size)
    )
    total_steps = cfg.epochs * per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    ctx = _Loop(cfg, groups is not None, pad, device, precision, total_steps)
    t0 = time.perf_counter()
    for epoch in range(cfg.epochs):
        if _spent(result, cfg, t0):
            break
        steps = _epoch_steps(len(examples), groups, cfg, rng)
        total, batches = _train_epoch(model, opt, examples, steps, result=result, t0=t0, ctx=ctx)
        if not batches:
            break
        mean = total / batches
        result.losses.append(mean)
        held_mean = None
        if held:
            paused = time.perf_counter()
            held_mean = heldout_loss(
                model, held, batch_size=cfg.batch_size, pad=pad, precision=precision
            )
            result.heldout_losses.append(held_mean)
            t0 += time.perf_counter() - paused  # the budget and `seconds` count training only
        logger.info(
            "sft epoch %d/%d: loss %.4f, held-out %s (%d steps)",
            epoch + 1,
            cfg.epochs,
            mean,
            "-" if held_mean is None else f"{held_mean:.4f}",
            result.steps,
        )
        if on_epoch is not None:
            on_epoch(epoch + 1, mean, held_mean)
        if not math.isfinite(mean):
            raise RuntimeError(f"sft: loss became {mean} in epoch {epoch + 1}")
    result.seconds = time.perf_counter() - t0
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return result


def _pairs(path: Path) -> list[tuple[str, str]]:
    from rlvr_world.items import load_items

    return [(item.prompt, item.target) for item in load_items(path)]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trainer.sft``: fine-tune on the items' prompt/target pairs, print a JSON line."""
    p = argparse.ArgumentParser(prog="python -m trainer.sft", description=__doc__)
    p.add_argument("--model", type=Path, required=True, help="model + tokenizer directory")
    p.add_argument("--items", type=Path, required=True, help="prompt items (JSON Lines)")
    p.add_argument("--out", type=Path, required=True, help="output checkpoint directory")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    values = {k: json.loads(v) for k, _, v in (o.partition("=") for o in args.overrides)}
    result = run_sft(args.model, _pairs(args.items), args.out, SftConfig(**values))
    print(json.dumps({"path": str(result.path), "steps": result.steps, "losses": result.losses}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
