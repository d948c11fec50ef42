"""Next-token sampling math of the transformers engine: pure tensor functions, no model.

Order of operations (vLLM's): scale by the temperature, keep the top-k, then the smallest set whose
probability reaches top-p, then draw. The reported behaviour log-prob is the log-softmax of the
temperature-scaled logits over the whole vocabulary (before truncation), as the trainer recomputes
it; greedy (temperature 0) takes the arg-max and reports the log-softmax of the raw logits.
"""

from __future__ import annotations

import torch

from services.rollout.engine import SamplingParams


def effective_temperature(temperature: float) -> float:
    """The divisor of the logits: the temperature, or 1 for greedy (temperature 0)."""
    return temperature if temperature > 0 else 1.0


def scaled_logprobs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log_softmax(logits / T)`` in float32 over the last axis."""
    return torch.log_softmax(logits.float() / effective_temperature(temperature), dim=-1)


def truncate(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set every logit outside the top-k, then outside the top-p nucleus, to -inf (rows kept >= 1).

    ``top_k`` <= 0 and ``top_p`` >= 1 (or <= 0) switch the respective filter off."""
    out = logits.clone()
    vocab = out.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if 0 < top_p < 1:
        sorted_logits, order = torch.sort(out, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs  # mass strictly above each token
        drop_sorted = before >= top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


def restrict(logits: torch.Tensor, allowed: tuple[int, int] | None) -> torch.Tensor:
    """``logits`` with every id outside ``[begin, end)`` set to -inf (unchanged for None)."""
    if allowed is None:
        return logits
    begin, end = allowed
    ids = torch.arange(logits.shape[-1], device=logits.device)
    return logits.masked_fill((ids < begin) | (ids >= end), float("-inf"))


def next_tokens(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row of ``logits`` (B, V); returns (tokens (B,), log-probs (B,)).

    The log-probs are over the full vocabulary even when ``params.allowed_tokens`` masks the draw.
    """
    logp = scaled_logprobs(logits, params.temperature)
    logits = restrict(logits, params.allowed_tokens)
    if params.temperature <= 0:
        tokens = torch.argmax(logits, dim=-1)
    else:
        kept = truncate(logits.float() / params.temperature, params.top_k, params.top_p)
        probs = torch.softmax(kept, dim=-1)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return tokens, logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
