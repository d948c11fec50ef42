"""The decision ceiling of a text-game model: how much exact match a policy could gain by only
choosing *when* to answer "nothing changes".

GRPO from a start that rarely gets a changed transition right mostly moves one decision: answer
"nothing changes" or attempt a change. This diagnostic bounds what that move alone can reach. For
each held-out item it samples ``k`` answers from the model (temperature 1), takes ``p_nc`` (the
share that predict "nothing changes") and the model's best attempt (the most likely sample that
predicts a change), and sweeps a threshold ``t``: answer "nothing changes" when ``p_nc >= t``,
else the best attempt. ``t = 0`` is always "nothing changes"; ``t > 1`` always attempts. The best
row is the most a reweighting of that decision can score with the model's present knowledge; a
gain beyond it needs better attempts (more competence), not a different decision.

``python -m rlvr_world.apps.pipeline.ceiling CONFIG MODEL_DIR [--samples K] [--items N]
[--seed S] [--out rows.json]``: the held-out items are the run's (same config and ``run.seed``).
Text game only; the model runs in process on CPU (``services.rollout.transformers_engine``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rlvr_world.apps.pipeline.config import load_pipeline_config
from rlvr_world.apps.pipeline.data import build_items
from rlvr_world.apps.pipeline.results import TEXT_NO_CHANGE_ANSWER, predicts_no_change
from rlvr_world.items import PromptItem
from rlvr_world.rewards.text_game import score_text_game

DEFAULT_THRESHOLDS = (0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.01)


@dataclass(frozen=True)
class ItemDecision:
    """One held-out item: the sampled no-change share and whether each choice is exact."""

    changed: bool
    p_nc: float
    no_change_exact: bool
    attempt_exact: bool


@dataclass(frozen=True)
class SweepRow:
    threshold: float
    exact: float
    no_change_share: float


def sweep(items: Sequence[ItemDecision], thresholds: Sequence[float]) -> list[SweepRow]:
    """Exact match of the threshold policy at each ``t`` (``ValueError`` on no items)."""
    if not items:
        raise ValueError("sweep needs at least one item")
    rows = []
    for t in thresholds:
        says_nc = [d.p_nc >= t for d in items]
        right = [
            d.no_change_exact if nc else d.attempt_exact
            for d, nc in zip(items, says_nc, strict=True)
        ]
        rows.append(SweepRow(t, sum(right) / len(items), sum(says_nc) / len(items)))
    return rows


def _exact(item: PromptItem, text: str, variant: str) -> bool:
    """Exact match by the run's scorer (the binary reward), as the held-out evaluation scores."""
    result = score_text_game(text, item.ground_truth, item.extra_info, variant=variant)
    return result.ok and result.reward == 1.0


def measure(
    model: Path,
    items: Sequence[PromptItem],
    samples: int,
    seed: int,
    *,
    max_tokens: int,
    variant: str,
) -> list[ItemDecision]:
    """Sample ``samples`` answers per item from ``model`` (at most ``max_tokens`` each) and score
    both choices, "nothing changes" included, with the real scorer (``variant``)."""
    import torch

    from services.rollout.engine import SamplingParams
    from services.rollout.transformers_engine import TransformersEngine

    torch.manual_seed(seed)
    engine = TransformersEngine(str(model))
    out = []
    for item in items:
        gen = engine.generate(
            item.prompt,
            SamplingParams(n=samples, temperature=1.0, max_tokens=max_tokens, seed=seed),
        )
        texts = [(str(engine.tokenizer.decode(s.token_ids)), sum(s.logprobs)) for s in gen.samples]
        flags = [predicts_no_change(text) for text, _ in texts]
        attempts = [(logp, text) for (text, logp), nc in zip(texts, flags, strict=True) if not nc]
        best = max(attempts)[1] if attempts else None
        out.append(
            ItemDecision(
                changed=bool(item.changed),
                p_nc=sum(flags) / samples,
                no_change_exact=_exact(item, TEXT_NO_CHANGE_ANSWER, variant),
                attempt_exact=best is not None and _exact(item, best, variant),
            )
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="the run's pipeline config (held-out items)")
    parser.add_argument("model", type=Path, help="model directory (start, RLVR or control)")
    parser.add_argument("--samples", type=int, default=8, help="answers per item (k)")
    parser.add_argument("--items", type=int, default=None, help="first N held-out items")
    parser.add_argument("--seed", type=int, default=None, help="default: the config's run.seed")
    parser.add_argument("--out", type=Path, default=None, help="write the per-item rows (JSON)")
    args = parser.parse_args(argv)
    if args.samples < 1:
        parser.error("--samples must be at least 1")
    if not args.model.is_dir():
        parser.error(f"model: {args.model} is not a model directory")
    cfg = load_pipeline_config(args.config)
    if cfg.task != "text_game":
        parser.error(
            f"{args.config}: the decision ceiling is for text-game runs (task: {cfg.task})"
        )
    seed = cfg.run.seed if args.seed is None else args.seed
    _, test = build_items(cfg.text_data, seed)
    test = test[: args.items] if args.items else test
    decisions = measure(
        args.model,
        test,
        args.samples,
        seed,
        max_tokens=cfg.eval.max_tokens,
        variant=cfg.rl.reward_variant,
    )
    if args.out is not None:
        args.out.write_text(json.dumps([asdict(d) for d in decisions]))
    for row in sweep(decisions, DEFAULT_THRESHOLDS):
        share = row.no_change_share
        print(f"t={row.threshold:.3f}  exact={row.exact:.3f}  no-change share={share:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
