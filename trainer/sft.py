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

The result is a directory in the layout the trainer and the rollout service read
(``save_pretrained`` safetensors + the tokenizer), so GRPO starts from it (``model.path``) and
the rollout serves it (``--model``). Not a general fine-tuning library: no packing, no LoRA, no
evaluation loop.

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
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

logger = logging.getLogger(__name__)

IGNORE = -100


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
    torch_threads: int = Field(default=1, ge=1, le=512, description="torch intra-op threads")
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


@dataclass(frozen=True)
class Example:
    """Token ids of one example and the labels (-100 on the prompt)."""

    input_ids: list[int]
    labels: list[int]


@dataclass
class SftResult:
    """Where the model went and how the loss moved."""

    path: Path
    steps: int = 0
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)  # mean loss per epoch


def encode(tokenizer: Any, prompt: str, target: str, max_length: int) -> Example:
    """``<bos> prompt target <eos>`` with the prompt masked; ``ValueError`` if too long."""
    p = [int(i) for i in tokenizer(prompt, add_special_tokens=True)["input_ids"]]
    t = [int(i) for i in tokenizer(target, add_special_tokens=False)["input_ids"]]
    t.append(int(tokenizer.eos_token_id))
    if len(p) + len(t) > max_length:
        raise ValueError(
            f"example of {len(p)} prompt + {len(t)} target tokens exceeds max_length {max_length}"
        )
    return Example(input_ids=p + t, labels=[IGNORE] * len(p) + t)


def collate(batch: Sequence[Example], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Right-padded ``(input_ids, attention_mask, labels)``."""
    length = max(len(e.input_ids) for e in batch)
    ids = torch.full((len(batch), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), length), dtype=torch.long)
    labels = torch.full((len(batch), length), IGNORE, dtype=torch.long)
    for i, e in enumerate(batch):
        n = len(e.input_ids)
        ids[i, :n] = torch.tensor(e.input_ids)
        mask[i, :n] = 1
        labels[i, :n] = torch.tensor(e.labels)
    return ids, mask, labels


def target_loss(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """Mean cross-entropy over the target tokens (next-token shift)."""
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1, :].float()
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=IGNORE
    )


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
    packed = pack(samples, torch.device("cpu"))
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
        return target_loss(model, *collate([examples[i] for c in step for i in c], pad))
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


def run_sft(
    model_dir: Path,
    pairs: Sequence[tuple[str, str]],
    out_dir: Path,
    cfg: SftConfig,
    on_epoch: Callable[[int, float], None] | None = None,
) -> SftResult:
    """Fine-tune the model in ``model_dir`` on ``(prompt, target)`` pairs; save to ``out_dir``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not pairs:
        raise ValueError("sft: no examples")
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.torch_threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    examples = [encode(tokenizer, p, t, cfg.max_length) for p, t in pairs]
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = random.Random(cfg.seed)
    result = SftResult(path=out_dir)
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
    t0 = time.perf_counter()
    for epoch in range(cfg.epochs):
        if _spent(result, cfg, t0):
            break
        total, batches = 0.0, 0
        for step in _epoch_steps(len(examples), groups, cfg, rng):
            if _spent(result, cfg, t0):
                break
            for group in opt.param_groups:
                group["lr"] = _lr_at(result.steps, cfg, total_steps)
            loss = _step_loss(model, examples, step, shared=groups is not None, pad=pad)
            opt.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            result.steps += 1
            total, batches = total + float(loss.detach()), batches + 1
        if not batches:
            break
        mean = total / batches
        result.losses.append(mean)
        logger.info(
            "sft epoch %d/%d: loss %.4f (%d steps)", epoch + 1, cfg.epochs, mean, result.steps
        )
        if on_epoch is not None:
            on_epoch(epoch + 1, mean)
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
