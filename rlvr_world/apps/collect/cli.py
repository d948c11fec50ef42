"""``rlvr-world collect web``: the command line of the MiniWoB++ collector. Thin: parse, run, print.

Playwright and the browser are imported only when the command runs, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rlvr_world.apps.subcommand import add_command, add_group

if TYPE_CHECKING:
    from rlvr_world.scaffold.cli import Subparsers

logger = logging.getLogger(__name__)

__all__ = ["add_collect_parser"]


def _csv(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def add_collect_parser(sub: Subparsers) -> None:
    """Add ``collect`` with its ``web`` subcommand to the ``rlvr-world`` subcommands."""
    kinds = add_group(sub, "collect", help="record world-model data from real environments")
    web = add_command(
        kinds,
        "web",
        _run_collect_web,
        help="record MiniWoB++ transitions in headless Chromium",
        description=(
            "Drive MiniWoB++ task pages (from the miniwob package) in Debian's headless "
            "Chromium with a seeded random policy, and record accessibility-tree transitions "
            "in the shared MiniWoB++ format. Running the command again on the same --out "
            "continues it. Outputs: transitions.jsonl, train.jsonl, test.jsonl (split by "
            "task), failures.jsonl, summary.json; runs.jsonl has the transitions/s of each run."
        ),
    )
    web.add_argument("--out", type=Path, required=True, help="output directory (resumable)")
    web.add_argument(
        "--tasks",
        type=_csv,
        required=True,
        help="comma-separated MiniWoB++ task names (e.g. click-button,enter-text), or 'all'",
    )
    web.add_argument("--episodes", type=int, default=5, help="episodes per task (default 5)")
    web.add_argument("--max-steps", type=int, default=5, help="actions per episode (default 5)")
    web.add_argument("--seed", type=int, default=0, help="seed of pages, policy and split")
    web.add_argument(
        "--test-fraction",
        type=float,
        default=0.2,
        help="share of task families held out (default 0.2)",
    )
    web.add_argument(
        "--test-tasks",
        type=_csv,
        default=(),
        help="comma-separated held-out tasks (their whole families) instead of --test-fraction",
    )
    web.add_argument(
        "--max-tree-chars",
        type=int,
        default=20_000,
        help="longest tree recorded, in characters; longer is a tree_too_long failure",
    )
    web.add_argument("--html-root", type=Path, default=None, help="MiniWoB++ html folder")
    web.add_argument(
        "--chromium", type=Path, default=Path("/usr/bin/chromium"), help="Chromium binary"
    )
    web.add_argument(
        "--settle-ms", type=int, default=100, help="the tree must not change this long (ms)"
    )
    web.add_argument(
        "--step-ms",
        type=int,
        default=1000,
        help="page time (fake clock) let pass after the start and after each action",
    )
    web.add_argument(
        "--max-settle-ms", type=int, default=5000, help="longest wait for a page to settle"
    )


def _run_collect_web(args: argparse.Namespace) -> int:
    from rlvr_world.apps.collect.browser import BrowserSettings
    from rlvr_world.apps.collect.web import (
        CollectSettings,
        available_tasks,
        collect,
        default_html_root,
    )

    html_root = args.html_root if args.html_root is not None else default_html_root()
    try:
        tasks = available_tasks(html_root) if args.tasks == ("all",) else args.tasks
        settings = CollectSettings(
            tasks=tuple(tasks),
            episodes=args.episodes,
            max_steps=args.max_steps,
            seed=args.seed,
            test_fraction=args.test_fraction,
            test_tasks=args.test_tasks,
            max_tree_chars=args.max_tree_chars,
            html_root=html_root,
            browser=BrowserSettings(
                executable=args.chromium,
                settle_s=args.settle_ms / 1000,
                step_ms=args.step_ms,
                max_settle_s=args.max_settle_ms / 1000,
            ),
        )
        summary, run = collect(settings, args.out)
    except (ValueError, FileNotFoundError) as exc:
        print(f"rlvr-world collect web: {exc}", file=sys.stderr)
        return 2
    print(
        f"this run: {run['episodes']} episodes, {run['transitions']} transitions in "
        f"{run['seconds']:.1f} s ({run['transitions_per_s']:.2f} transitions/s), "
        f"failures {json.dumps(run['failures'])}"
    )
    print(
        f"{args.out}: {summary['transitions']} transitions "
        f"({summary['changed']} changed, {summary['unchanged']} unchanged; "
        f"{summary['duplicates']} duplicates dropped), train {summary['train']} / test "
        f"{summary['test']} (held-out tasks: {', '.join(summary['test_tasks']) or 'none'}), "
        f"failures {json.dumps(summary['failures'])}"
    )
    return 0
