"""Seconds from nothing to a ready service stack, as ``rlvr-world run`` starts it, against the old
way, in the same run and on the same model.

The stack: the embedded Redis, then the reward, decoder and rollout services
(``rlvr_world.apps.run.stack.start_services``), ready when each answers gRPC health SERVING;
with ``--trainer``, also the trainer process started next to them. Three ways, alternated
``--repeats`` times, medians printed with ratios against the baseline:

* **baseline** (the code before ``da9218f``): the services one after another, each compiling
  every module it imports from source (``PYTHONDONTWRITEBYTECODE=1`` with an empty
  ``PYTHONPYCACHEPREFIX``: no ``.pyc`` is found or written; this is what a ``pip --no-compile``
  environment does on a machine that sets ``PYTHONDONTWRITEBYTECODE``, as CI's does), and the
  decoder loading ``AutoTokenizer`` (which imports torch);
* **bytecode**: one after another, with the ``.pyc`` files of ``scripts/compile_bytecode.py``
  and the decoder reading ``tokenizer.json`` (no torch);
* **ours**: bytecode, all services at once (``Supervisor.start_many``), the decoder reading
  ``tokenizer.json`` without torch.

Also printed: each service's own seconds to ready in the last run of each way (from the
supervisor's log).

    python bench/startup.py [--repeats 3] [--trainer]

At ``da9218f``, quiet 2-core machine, ``--repeats 2 --trainer``: baseline 44.0 s, bytecode 13.8 s
(3.2x), ours 6.2 s (7.1x); the rollout service (torch + transformers + the model) and the trainer
are the last ready, at 5.5-6.6 s each.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlvr_world.apps.run import stack  # noqa: E402
from rlvr_world.apps.supervisor import ProcessSpec, Supervisor  # noqa: E402
from rlvr_world.queue.server import start_embedded  # noqa: E402
from rlvr_world.tiny_model import TinyLMConfig, build_tiny_lm  # noqa: E402

WAYS = ("baseline", "bytecode", "ours")


class _ReadyTimes(logging.Handler):
    """Collects the supervisor's ``<name> ready after <s>s`` lines."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        match = re.fullmatch(r"(\S+) ready after ([\d.]+)s", record.getMessage())
        if match:
            self.seconds[match.group(1)] = float(match.group(2))


@contextmanager
def _environment(way: str, cache: Path) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    if way == "baseline":
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
        os.environ["PYTHONPYCACHEPREFIX"] = str(cache)  # empty: every import compiles
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _decoder_with_autotokenizer(spec: ProcessSpec) -> ProcessSpec:
    """The decoder as before: ``AutoTokenizer`` (transformers imports torch)."""
    code = (
        "import sys, services.decoder.text as t; "
        "t.rust_tokenizer_usable = lambda directory: False; "
        "from services.decoder.cli import main; sys.argv[0] = 'decoder'; sys.exit(main())"
    )
    argv = [spec.argv[0], "-c", code, *spec.argv[3:]]  # drop "-m services.decoder"
    return ProcessSpec(spec.name, argv, env=spec.env, ready=spec.ready)


def start_once(way: str, model: Path, root: Path, trainer: Path | None) -> tuple[float, dict]:
    """Seconds until the whole stack answers; each process's own seconds to ready."""
    times = _ReadyTimes()
    logging.getLogger("rlvr_world.apps.supervisor").addHandler(times)
    run_dir = Path(tempfile.mkdtemp(dir=root))
    t0 = time.perf_counter()
    with _environment(way, Path(tempfile.mkdtemp(dir=root))):
        redis = start_embedded(run_dir / "redis")
        try:
            with Supervisor(run_dir) as sup:
                specs = [
                    stack.reward_spec(1),
                    stack.decoder_spec(model),
                    stack.rollout_spec(model, redis.url, 64, run_dir),
                ]
                if trainer is not None:
                    specs.append(stack.trainer_spec(_trainer_yaml(trainer, model, redis.url)))
                stack.ensure_local_token()
                if way == "ours":
                    sup.start_many(specs)
                else:
                    if way == "baseline":
                        specs[1] = _decoder_with_autotokenizer(specs[1])
                    for spec in specs:
                        sup.start(spec)
                seconds = time.perf_counter() - t0
        finally:
            redis.close()
    logging.getLogger("rlvr_world.apps.supervisor").removeHandler(times)
    return seconds, dict(times.seconds)


def _trainer_yaml(root: Path, model: Path, redis_url: str) -> Path:
    """The trainer's YAML as ``rlvr-world run`` writes it (``configs/pipeline/bench.yaml``)."""
    import yaml

    from rlvr_world.apps.pipeline.config import load_pipeline_config
    from rlvr_world.apps.run.grpo import trainer_config

    cfg = load_pipeline_config(ROOT / "configs" / "pipeline" / "bench.yaml", {})
    out = Path(tempfile.mkdtemp(dir=root))
    data = trainer_config(
        cfg.rl,
        model=model,
        redis_url=redis_url,
        trainer_dir=out / "trainer",
        device="cpu",
        idle_timeout_s=600,
        seed=0,
    )
    path = out / "trainer.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trainer", action="store_true", help="start the trainer process too")
    args = parser.parse_args()
    logging.getLogger("rlvr_world.apps.supervisor").setLevel(logging.INFO)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shape = TinyLMConfig(
            vocab_size=512, hidden_size=64, num_layers=2, num_heads=2, max_positions=640
        )
        model = build_tiny_lm(root / "model", ['{"modified": [], "removed": []}'] * 20, shape)
        seconds: dict[str, list[float]] = {w: [] for w in WAYS}
        last: dict[str, dict] = {}
        for repeat in range(args.repeats):
            for way in WAYS:
                s, per = start_once(way, model, root, root if args.trainer else None)
                seconds[way].append(s)
                last[way] = per
                print(f"repeat {repeat + 1}: {way:9s} {s:6.2f} s  {per}", flush=True)
    base = statistics.median(seconds["baseline"])
    print(
        f"\nstack ready (Redis, reward, decoder, rollout{', trainer' if args.trainer else ''}), "
        f"medians of {args.repeats}, cpu count {os.cpu_count()}, load {os.getloadavg()[0]:.2f}:"
    )
    for way in WAYS:
        med = statistics.median(seconds[way])
        ratio = base / med
        print(f"  {way:9s} {med:6.2f} s  baseline / this = {ratio:5.2f}x  per process: {last[way]}")


if __name__ == "__main__":
    main()
