"""Prompt items of a web run (``task: web``): the transitions named by ``data.sources``.

``build_web_run_items`` reads every source (``tasks.web.load_web_sources``: the shared MiniWoB++
and WebArena files, a folder of them, or a collector's output directory), then lets
``web.items.build_web_items`` de-duplicate, split by task family (seeded by ``data.split_seed``,
else the run's seed; ``data.test_tasks`` names held-out tasks instead), drop examples over
``data.max_chars`` characters of prompt + target, and cap each side (train: a seeded sample; the
held-out side: a seeded draw that keeps its changed/unchanged shares, ``stratified_draw``).
``fit_to_tokenizer`` is the second length filter, once the policy's tokenizer exists: an example
must fit ``data.max_tokens`` tokens exactly as SFT encodes it (``<bos>`` prompt target
``<eos>``). Both filters are counted in the returned report, which the run writes to its summary;
nothing is dropped silently.

Does not build a model and does not score anything.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr_world.apps.pipeline.config import WebDataConfig
from rlvr_world.items import PromptItem
from rlvr_world.tasks.web import load_web_sources
from rlvr_world.web.items import build_web_items


def build_web_run_items(
    cfg: WebDataConfig, seed: int
) -> tuple[list[PromptItem], list[PromptItem], dict[str, Any]]:
    """``(train, test, report)`` (module docstring). ``FileNotFoundError`` for a source with no
    transition file, ``ValueError`` for a bad record (file and line named), an unknown held-out
    task, or a split left empty by the filters."""
    transitions = load_web_sources(cfg.sources)
    if not transitions:
        raise ValueError(f"data.sources: no web transition in {[str(p) for p in cfg.sources]}")
    split_seed = cfg.split_seed_for(seed)
    web = build_web_items(
        transitions,
        count_tokens=len,
        max_tokens=cfg.max_chars if cfg.max_chars is not None else sys.maxsize,
        test_fraction=cfg.test_fraction,
        test_tasks=cfg.test_tasks,
        seed=split_seed,
        style=cfg.prompt,
        max_train=cfg.max_train,
    )
    renamed = {"train": "train_kept_chars", "test": "test_kept_chars"}
    renamed |= {f"{side}_too_long": f"{side}_too_long_chars" for side in ("train", "test")}
    report: dict[str, Any] = {
        renamed.get(k, k): v
        for k, v in web.report.items()
        if not k.endswith(("_changed", "_unchanged"))  # counted again after the token filter
    }
    test = stratified_draw(web.test, cfg.max_test, random.Random(split_seed))
    report.update(
        test_over_cap=len(web.test) - len(test),
        split_seed=split_seed,
        max_chars=cfg.max_chars,
        train_tasks=list(web.train_tasks),
        test_tasks=list(web.test_tasks),
    )
    for name, items in (("train", web.train), ("test", test)):
        if not items:
            raise ValueError(
                f"web data: no {name} item is left after the split and the length filter "
                f"({report}); raise data.max_chars or change the held-out tasks"
            )
    return web.train, test, report


def stratified_draw(items: Sequence[PromptItem], n: int, rng: random.Random) -> list[PromptItem]:
    """``n`` items (all when fewer, in their order) keeping the changed/unchanged shares; the
    draw keeps the items' order."""
    if n >= len(items):
        return list(items)
    changed = [i for i, item in enumerate(items) if item.changed]
    unchanged = [i for i, item in enumerate(items) if not item.changed]
    n_changed = round(n * len(changed) / len(items))
    chosen = set(rng.sample(changed, n_changed) + rng.sample(unchanged, n - n_changed))
    return [item for i, item in enumerate(items) if i in chosen]


def fit_to_tokenizer(
    items: Sequence[PromptItem], model_dir: Path, max_tokens: int
) -> tuple[list[PromptItem], int]:
    """``(items that fit max_tokens as SFT encodes them, how many did not)``."""
    from transformers import AutoTokenizer

    from trainer.sft_data import encode

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    kept: list[PromptItem] = []
    for item in items:
        try:
            encode(tokenizer, item.prompt, item.target, max_tokens)
        except ValueError:
            continue
        kept.append(item)
    return kept, len(items) - len(kept)


def fit_run_items(
    model_dir: Path,
    train: list[PromptItem],
    test: list[PromptItem],
    stats: dict[str, Any],
    limit: int,
) -> tuple[list[PromptItem], list[PromptItem], dict[str, Any]]:
    """The token length filter of a web run (``fit_to_tokenizer`` at ``limit`` tokens) on both
    splits, counted in the returned stats; ``ValueError`` when a split is left empty."""
    train, long_train = fit_to_tokenizer(train, model_dir, limit)
    test, long_test = fit_to_tokenizer(test, model_dir, limit)
    if not train or not test:
        raise ValueError(
            f"web data: every {'train' if not train else 'held-out'} item exceeds "
            f"data.max_tokens={limit} tokens of the policy's tokenizer"
        )
    stats = {**stats, "train_too_long_tokens": long_train, "test_too_long_tokens": long_test}
    stats |= {"train_changed": sum(1 for i in train if i.changed), "max_tokens": limit}
    return train, test, stats
