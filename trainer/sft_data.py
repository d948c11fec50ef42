"""SFT examples and their losses: ``<bos> prompt target <eos>`` with the prompt masked, the
padded batch, the mean target cross-entropy, and the held-out loss an SFT run measures after
each epoch (``trainer.sft``). Pure torch; the tokenizer is passed in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlvr_world.devices import autocast

IGNORE = -100


@dataclass(frozen=True)
class Example:
    """Token ids of one example and the labels (-100 on the prompt)."""

    input_ids: list[int]
    labels: list[int]


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


def heldout_examples(
    tokenizer: Any, pairs: Sequence[tuple[str, str]], max_length: int
) -> tuple[list[Example], int]:
    """The held-out pairs encoded as training examples, and how many were left out for being
    longer than ``max_length``."""
    kept: list[Example] = []
    for prompt, target in pairs:
        try:
            kept.append(encode(tokenizer, prompt, target, max_length))
        except ValueError:
            continue
    return kept, len(pairs) - len(kept)


def heldout_loss(
    model: torch.nn.Module,
    examples: Sequence[Example],
    *,
    batch_size: int,
    pad: int,
    precision: str,
) -> float:
    """Mean cross-entropy over every target token of ``examples`` (token-weighted, no gradients,
    eval mode; the model's training mode is restored)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    try:
        with torch.no_grad():
            for i in range(0, len(examples), batch_size):
                ids, mask, labels = (
                    t.to(device) for t in collate(examples[i : i + batch_size], pad)
                )
                with autocast(device, precision):
                    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1, :]
                target = labels[:, 1:].reshape(-1)
                total += float(
                    torch.nn.functional.cross_entropy(
                        logits.float().reshape(-1, logits.shape[-1]),
                        target,
                        ignore_index=IGNORE,
                        reduction="sum",
                    )
                )
                tokens += int((target != IGNORE).sum())
    finally:
        model.train(was_training)
    return total / max(tokens, 1)
