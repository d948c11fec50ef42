"""Examples/s of SFT on the kitchen game: one state's tokens run once per step
(``sft.share_prompts``) against every example in full (the baseline), same model and examples.

The kitchen game's train transitions come ~8 to a state (one per action) and the state is ~97%
of the prompt's characters, so a step that takes a state's actions together and runs the state
once (``trainer.sft.shared_target_loss``) does a fraction of the work. The baseline is plain SFT
at its best batch size of those given (``--batch-sizes``, default 8 and 16: the pipeline's is 8);
the shared variants are ``--batch-size B --group-rows R`` pairs. Each variant trains one epoch
over the same ``--examples`` transitions from the same tiny from-scratch model
(``configs/pipeline/kitchen_tiny.yaml``'s shape), timed by ``run_sft`` (the training loop only:
no load or save), best of ``--repeats``; one torch thread each, in turns, in one process.

    python bench/sft_sharing.py [--examples 400] [--repeats 2]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch


def _epoch_seconds(model: Path, pairs: list[tuple[str, str]], out: Path, **cfg: object) -> float:
    from trainer.sft import SftConfig, run_sft

    config = SftConfig(epochs=1, lr=2e-3, torch_threads=1, seed=0, **cfg)  # type: ignore[arg-type]
    return run_sft(model, pairs, out, config).seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--examples", type=int, default=400, help="train transitions per epoch")
    p.add_argument("--repeats", type=int, default=2, help="best of this many epochs per variant")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 16], help="plain SFT")
    p.add_argument(
        "--shared",
        nargs="+",
        default=["8:0", "16:4"],
        help="shared variants as BATCH:GROUP_ROWS (group_rows 0: up to the batch of one state)",
    )
    args = p.parse_args()
    torch.set_num_threads(1)

    from rlvr_world.items import text_game_item
    from rlvr_world.tasks.text_game.kitchen import enumerate_transitions
    from rlvr_world.tiny_model import TinyLMConfig, build_tiny_lm

    items = [text_game_item(t, str(i)) for i, t in enumerate(enumerate_transitions(2, 1))]
    items = items[: args.examples]
    pairs = [(i.prompt, i.target) for i in items]
    shape = TinyLMConfig(vocab_size=1024, hidden_size=128, num_layers=4, num_heads=4)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build_tiny_lm(root / "base", [t for pair in pairs for t in pair], shape)
        rows: list[tuple[str, float]] = []
        for b in args.batch_sizes:
            best = min(
                _epoch_seconds(model, pairs, root / "out", batch_size=b)
                for _ in range(args.repeats)
            )
            rows.append((f"plain, batch {b}", best))
        baseline = min(rows, key=lambda r: r[1])
        for spec in args.shared:
            b, _, r = spec.partition(":")
            best = min(
                _epoch_seconds(
                    model,
                    pairs,
                    root / "out",
                    batch_size=int(b),
                    share_prompts=True,
                    group_rows=int(r or 0),
                )
                for _ in range(args.repeats)
            )
            rows.append((f"shared, batch {b}, group_rows {r or 0}", best))
    n = len(pairs)
    print(f"{n} kitchen transitions per epoch, one thread, best of {args.repeats}")
    print(f"baseline: {baseline[0]} ({n / baseline[1]:.1f} examples/s)")
    for name, seconds in rows:
        print(
            f"{name:32s} {seconds:7.2f} s  {n / seconds:6.1f} examples/s  "
            f"{baseline[1] / seconds:4.2f}x the baseline"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
