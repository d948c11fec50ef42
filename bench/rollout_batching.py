"""Samples/s of the transformers rollout engine with P requests of G samples in flight: requests
joined into one decode loop (``batch_rows``, the default 64) against one request at a time
(``batch_rows=0``) and against the engine before (one request at a time, its KV cache grown by
``torch.cat`` at every step instead of written into reserved room), in the same run,
alternated, on the same prompts and seeds.

Model and prompts: a from-scratch tiny Llama (``--hidden``, ``--layers``, 4 heads) with the
kitchen game's prompts made by the pipeline's own ``prepare`` (no SFT, so answers run to
``--max-tokens`` unless EOS is drawn), or ``--model DIR --items FILE`` (a model directory and a
``train.jsonl`` of prompt items, e.g. from ``bench/pipeline.py --keep``). P threads each send one
request at a time (G samples, temperature 1, a seed per request), as the orchestrator's
``max_inflight`` prompts do. One torch thread. Reported: the best of ``--repeats`` rounds of
``--requests`` requests per way, samples/s and generated tokens/s, and their ratio.

    python bench/rollout_batching.py [--inflight 4] [--group-size 4] [--max-tokens 96]
                                     [--requests 16] [--repeats 3] [--model DIR --items FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import threading
import time
from pathlib import Path

import torch


def _setup(args: argparse.Namespace, tmp: Path) -> tuple[Path, list[str]]:
    if args.model is not None:
        items = [json.loads(line) for line in Path(args.items).read_text().splitlines()]
        return Path(args.model), [str(item["prompt"]) for item in items]
    from rlvr_world.apps.pipeline.config import load_pipeline_config
    from rlvr_world.apps.pipeline.runner import PipelineRun

    root = Path(__file__).resolve().parents[1]
    cfg = load_pipeline_config(
        root / "configs" / "pipeline" / "bench.yaml",
        {
            "sft.enabled": False,
            "data.max_train": 64,
            "model.tiny.hidden_size": args.hidden,
            "model.tiny.num_layers": args.layers,
            "run.run_dir": str(tmp / "run"),
            "run.progress": False,
        },
    )
    run = PipelineRun(cfg, "bench-rollout")
    train, _, model = run.prepare()
    run.log.close()
    return model, [item.prompt for item in train]


def _round(engine: object, prompts: list[str], args: argparse.Namespace) -> tuple[float, int]:
    """Seconds and generated tokens for ``--requests`` requests from ``--inflight`` threads."""
    from services.rollout.engine import SamplingParams

    todo = list(range(args.requests))
    lock = threading.Lock()
    tokens = [0]

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            params = SamplingParams(
                n=args.group_size, max_tokens=args.max_tokens, temperature=1.0, seed=i
            )
            gen = engine.generate(prompts[i % len(prompts)], params)  # type: ignore[attr-defined]
            with lock:
                tokens[0] += sum(len(s.token_ids) for s in gen.samples)

    threads = [threading.Thread(target=worker) for _ in range(args.inflight)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, tokens[0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--inflight", type=int, default=4, help="requests in flight (P)")
    p.add_argument("--group-size", type=int, default=4, help="samples per request (G)")
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--requests", type=int, default=16, help="requests per round")
    p.add_argument("--repeats", type=int, default=3, help="alternating rounds of each way")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--model", help="model directory (with --items)")
    p.add_argument("--items", help="train.jsonl of prompt items (with --model)")
    args = p.parse_args()
    if (args.model is None) != (args.items is None):
        p.error("--model and --items go together")
    torch.set_num_threads(1)
    from unittest import mock

    from services.rollout.transformers_engine import TransformersEngine

    def cat_cache() -> contextlib.AbstractContextManager[object]:
        return mock.patch("services.rollout.transformers_engine.reserve", lambda *_: None)

    with tempfile.TemporaryDirectory() as tmp:
        model, prompts = _setup(args, Path(tmp))
        ways = {
            "before (one at a time, cache by cat)": (
                TransformersEngine(str(model), batch_rows=0),
                cat_cache,
            ),
            "one request at a time (batch_rows=0)": (
                TransformersEngine(str(model), batch_rows=0),
                contextlib.nullcontext,
            ),
            "joined (batch_rows=64)": (
                TransformersEngine(str(model), batch_rows=64),
                contextlib.nullcontext,
            ),
        }
        best: dict[str, tuple[float, int]] = {}
        for _ in range(args.repeats):
            for name, (engine, context) in ways.items():
                with context():
                    seconds, tokens = _round(engine, prompts, args)
                if name not in best or seconds < best[name][0]:
                    best[name] = (seconds, tokens)
    samples = args.requests * args.group_size
    print(
        f"{args.requests} requests x G={args.group_size}, {args.inflight} in flight, "
        f"max {args.max_tokens} new tokens, model {model.name}, 1 thread, best of {args.repeats}"
    )
    for name, (seconds, tokens) in best.items():
        print(
            f"{name:40s} {samples / seconds:8.2f} samples/s {tokens / seconds:9.1f} tokens/s "
            f"({seconds:.2f} s, {tokens} tokens)"
        )
    (before_s, before_t), (base_s, base_t), (ours_s, ours_t) = best.values()
    print(f"ratio joined / one at a time: {base_s / ours_s:.2f}x samples/s, ", end="")
    print(f"{(ours_t / ours_s) / (base_t / base_s):.2f}x tokens/s")
    print(f"ratio joined / before: {before_s / ours_s:.2f}x samples/s, ", end="")
    print(f"{(ours_t / ours_s) / (before_t / before_s):.2f}x tokens/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
