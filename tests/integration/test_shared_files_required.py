"""The tests that read ``RLVR_SHARED_DIR`` fail, naming the file, when it is set and the file is
missing, and skip, saying why, only when it is unset (``tests/helpers/shared.py``).

Each check runs pytest in a subprocess on one test per reader of the shared folder (the golden
files, the web and text-game data, the PushT episodes), first with ``RLVR_SHARED_DIR`` pointing at
an empty folder, then with it unset, and reads each test's outcome and message from its JUnit
report.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.helpers.shared import SHARED_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
#: One test per reader of the shared folder, and the file (or pattern) it must name.
NEEDS = {
    "tests/unit/test_web_items.py::test_every_shared_target_scores_exactly_one"
    "[miniwob_transitions.jsonl]": "data/web/miniwob_transitions.jsonl",
    "tests/unit/test_tasks_web.py::test_webarena_recorded_diffs_all_reproduced": (
        "data/web/webarena_transitions.jsonl"
    ),
    "tests/unit/test_tasks_text_game.py::test_test_set_statistics": "data/text_game/test.jsonl",
    "tests/unit/test_text_game_strict.py::test_perfect_answers_on_300_real_records": (
        "data/text_game/test_sample_300.jsonl"
    ),
    "tests/unit/test_pipeline.py::"
    "test_real_data_trains_on_the_crawl_minus_the_test_split_and_draws_a_stratified_test": (
        "data/text_game/test.jsonl"
    ),
    "tests/unit/test_web.py::test_golden_web_paper_parity": "golden/golden_web.jsonl",
    "tests/unit/test_text_game_paper.py::test_golden_rewards_match_reference[binary]": (
        "golden/golden_text_game.jsonl"
    ),
    "tests/unit/test_grpo_golden.py::test_grpo_advantage_matches_golden": (
        "golden/golden_grpo_video.jsonl"
    ),
    "tests/integration/test_web_items_reward.py::test_targets_score_one_through_the_service"
    "[webarena_transitions.jsonl]": "data/web/webarena_transitions.jsonl",
    "tests/integration/test_video_tokenizer_train.py::test_tokenizer_learns_pusht_frames": (
        "data/video/pusht/ep*.npz"
    ),
}


def run_pytest(shared: str | None, report: Path) -> tuple[int, dict[str, tuple[str, str]], str]:
    """pytest on ``NEEDS`` with ``RLVR_SHARED_DIR`` = ``shared`` (None: unset); the exit code,
    each node's (outcome, message) from the JUnit ``report``, and the output's tail."""
    env = {k: v for k, v in os.environ.items() if k != SHARED_ENV}
    if shared is not None:
        env[SHARED_ENV] = shared
    cmd = [sys.executable, "-m", "pytest", "-n", "0", "-m", "", "-p", "no:cacheprovider", "-q"]
    cmd += [f"--junitxml={report}", *NEEDS]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    found: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        node = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = child.tag, child.get("message") or ""
        found[node] = (outcome, message)
    return done.returncode, found, (done.stdout + done.stderr)[-3000:]


def test_a_missing_shared_file_fails_with_its_name(tmp_path: Path) -> None:
    empty = tmp_path / "shared"
    empty.mkdir()
    code, found, output = run_pytest(str(empty), tmp_path / "report.xml")
    assert code != 0, output
    for node, name in NEEDS.items():
        outcome, message = found.get(node, ("absent", ""))
        assert outcome in ("failure", "error"), f"{node}: {outcome} with an empty {SHARED_ENV}"
        assert name in message and SHARED_ENV in message, f"{node}: {message!r}"


def test_an_unset_shared_dir_skips_with_the_reason(tmp_path: Path) -> None:
    code, found, output = run_pytest(None, tmp_path / "report.xml")
    assert code == 0, output
    for node in NEEDS:
        outcome, message = found.get(node, ("absent", ""))
        assert outcome == "skipped", f"{node}: {outcome} without {SHARED_ENV}"
        assert f"{SHARED_ENV} is not set" in message, f"{node}: {message!r}"
