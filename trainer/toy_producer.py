"""A toy rollout worker: samples groups from a causal LM, scores them, pushes them to the queue.

For tests, demos and benchmarks only. The reward is the fraction of response tokens that are
even ids (a target a tiny model can learn). It follows the trainer's published weights
(``rlvr_world.queue.weights``): when the version moves it reloads them and labels new groups
with it.
Not the orchestrator: no gRPC services, no real task.

``python -m trainer.toy_producer --model DIR --groups 20 --ids-out pushed.txt``
"""

from __future__ import annotations

import argparse
import logging
import time
import uuid
from pathlib import Path

import torch
from prometheus_client import CollectorRegistry
from transformers import AutoModelForCausalLM, PreTrainedModel

from rlvr_world.queue.schema import ScoredGroup, ScoredSample
from rlvr_world.queue.server import connect
from rlvr_world.queue.stream import Producer, QueueMetrics, StreamNames
from rlvr_world.queue.weights import WEIGHTS_KEY, read_weights
from rlvr_world.rewards.types import Status

logger = logging.getLogger(__name__)


@torch.no_grad()
def sample(
    model: PreTrainedModel, prompt: list[int], n: int, length: int, gen: torch.Generator
) -> tuple[list[list[int]], list[list[float]]]:
    """n responses of ``length`` tokens (temperature 1) and their log-probs."""
    ids = torch.tensor([prompt] * n)
    tokens: list[torch.Tensor] = []
    logps: list[torch.Tensor] = []
    for _ in range(length):
        logp = torch.log_softmax(model(input_ids=ids).logits[:, -1, :].float(), dim=-1)
        nxt = torch.multinomial(logp.exp(), 1, generator=gen)
        tokens.append(nxt.squeeze(-1))
        logps.append(logp.gather(-1, nxt).squeeze(-1))
        ids = torch.cat([ids, nxt], dim=1)
    return torch.stack(tokens, 1).tolist(), torch.stack(logps, 1).tolist()


def make_group(
    model: PreTrainedModel,
    version: int,
    args: argparse.Namespace,
    index: int,
    gen: torch.Generator,
) -> ScoredGroup:
    """Group ``index``: ``args.group_size`` samples from ``model``, each rewarded with its share of
    even token ids; with ``--fail-every k`` every k-th group keeps one valid sample (the rest
    ``ERROR``), so the trainer's too-few-valid drop is exercised."""
    vocab = int(model.config.vocab_size)
    prompt = torch.randint(1, vocab, (args.prompt_len,), generator=gen).tolist()
    toks, logps = sample(model, prompt, args.group_size, args.response_len, gen)
    failing = args.fail_every > 0 and index % args.fail_every == args.fail_every - 1
    samples = []
    for j, (t, lp) in enumerate(zip(toks, logps, strict=True)):
        if failing and j > 0:
            samples.append(ScoredSample(token_ids=t, logprobs=lp, reward=None, status=Status.ERROR))
            continue
        reward = sum(1 for x in t if x % 2 == 0) / len(t)
        samples.append(ScoredSample(token_ids=t, logprobs=lp, reward=reward, status=Status.OK))
    return ScoredGroup(
        group_id=f"{args.prefix}-{index}-{uuid.uuid4().hex[:8]}",
        prompt_id=f"toy-{index}",
        task="toy",
        policy_version=version,
        prompt_token_ids=prompt,
        samples=samples,
    )


def run(args: argparse.Namespace) -> int:
    """Push ``args.groups`` toy groups, reloading the model whenever the weights key names a new
    version; the exit code (0)."""
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(args.seed)
    model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(args.model)
    model.eval()  # type: ignore[no-untyped-call]  # transformers: eval() is unannotated
    handle = connect(Path(args.run_dir), args.redis_url)
    metrics = QueueMetrics(CollectorRegistry())
    producer = Producer(handle.client, StreamNames(), args.max_len, metrics)
    version = 0
    ids_out = Path(args.ids_out) if args.ids_out else None
    try:
        for i in range(args.groups):
            latest = read_weights(handle.client, args.weights_key)
            if latest is not None and latest.version != version:
                version = latest.version
                model = AutoModelForCausalLM.from_pretrained(latest.path)
                model.eval()  # type: ignore[no-untyped-call]  # transformers: unannotated
                logger.info("producer reloaded weights version %d", version)
            group = make_group(model, version, args, i, gen)
            producer.push(group, timeout_s=args.push_timeout)
            if args.interval > 0:
                time.sleep(args.interval)
            if ids_out is not None:
                with ids_out.open("a") as fh:
                    fh.write(group.group_id + "\n")
    finally:
        handle.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m trainer.toy_producer``: parse ``argv`` and ``run``."""
    p = argparse.ArgumentParser(prog="python -m trainer.toy_producer", description=__doc__)
    p.add_argument("--model", required=True, help="causal LM path (save_pretrained dir)")
    p.add_argument("--redis-url", default=None, help="default: $RLVR_REDIS_URL or embedded")
    p.add_argument("--run-dir", default="runs/toy_producer", help="embedded redis location")
    p.add_argument("--groups", type=int, default=10)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=4)
    p.add_argument("--response-len", type=int, default=6)
    p.add_argument("--fail-every", type=int, default=0, help="every k-th group: 1 valid sample")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-len", type=int, default=1000, help="stream bound")
    p.add_argument("--push-timeout", type=float, default=60.0)
    p.add_argument("--interval", type=float, default=0.0, help="seconds between groups")
    p.add_argument("--prefix", default="toy", help="group id prefix")
    p.add_argument("--weights-key", default=WEIGHTS_KEY)
    p.add_argument("--ids-out", default=None, help="append pushed group ids to this file")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
