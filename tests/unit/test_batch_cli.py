"""``rlvr-world reward score``: order preserved, one error line per bad line, the rest scored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rlvr_world.apps.batch import score_lines
from rlvr_world.apps.cli import main
from rlvr_world.rewards.types import Status

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "score_requests.jsonl"
TRUTH = "New items:\nNone\n\nDeleted items:\n[3] button 'Go'\n\nUpdated items:\nNone"


def _web(answer: str, **extra: object) -> str:
    row = {"data_source": "web_agent", "solution_str": answer, "ground_truth": TRUTH, **extra}
    return json.dumps(row)


def test_bad_lines_get_their_own_error_and_the_rest_score() -> None:
    lines = [
        _web(TRUTH),
        "{not json",
        "[1, 2]",
        json.dumps({"data_source": "chess", "solution_str": "e4", "ground_truth": "e4"}),
        json.dumps({"data_source": "web_agent", "solution_str": 5, "ground_truth": TRUTH}),
        json.dumps({"data_source": "web_agent", "solution_str": "x"}),
        _web(TRUTH, variant="greedy"),
        "   ",
        _web("New items:\nNone"),
    ]
    results = [r for _, r in score_lines(lines)]
    assert len(results) == 8  # the blank line is skipped, nothing else is
    assert results[0].status is Status.OK and results[0].reward == 1.0
    expected = [
        (1, "malformed JSON"),
        (2, "expected a JSON object, got list"),
        (3, "data_source: unknown 'chess'"),
        (4, "solution_str"),
        (5, "ground_truth: Field required"),
        (6, "variant"),
    ]
    for index, fragment in expected:
        result = results[index]
        assert result.status is Status.INVALID_INPUT, (index, result)
        assert fragment in result.message, (index, result.message)
        assert result.message.startswith(f"line {index + 1}:")
    assert results[7].status is Status.OK and 0.0 < results[7].reward < 1.0


def test_default_variant_applies_only_where_unset() -> None:
    eos = TRUTH + "<｜end▁of▁sentence｜>"
    lines = [_web(eos), _web(eos, variant="strict")]
    paper, strict = (r for _, r in score_lines(lines, variant="paper"))
    assert paper.reward < 1.0
    assert strict.reward == 1.0


def test_cli_scores_the_example_file(tmp_path: Path, capsys: object) -> None:
    out = tmp_path / "scores.jsonl"
    assert main(["reward", "score", "--input", str(EXAMPLES), "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    n_input = sum(1 for line in EXAMPLES.read_text(encoding="utf-8").splitlines() if line.strip())
    assert len(rows) == n_input
    assert all(set(row) >= {"reward", "status", "metrics"} for row in rows)
    statuses = [row["status"] for row in rows]
    assert statuses.count("invalid_input") == 2  # the truncated line and the unknown task
    assert rows[0]["status"] == "ok" and rows[0]["reward"] == 1.0
    assert "unparseable" in statuses


def test_help_is_instant_and_imports_no_torch() -> None:
    code = (
        "import sys; from rlvr_world.apps.cli import build_parser; build_parser(); "
        "heavy = [m for m in ('torch', 'transformers', 'vllm', 'redis') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "rlvr_world.apps.cli", "reward", "score", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "--input" in done.stdout


def test_resume_skips_the_lines_done_and_drops_a_cut_line(tmp_path: Path) -> None:
    from rlvr_world.apps.batch import score_file

    lines = [_web(TRUTH), "", _web("New items:\nNone"), "{bad", _web("x")]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    full = tmp_path / "full.jsonl"
    assert score_file(str(src), str(full), quiet=True) == 0
    done = full.read_text(encoding="utf-8").splitlines()
    assert len(done) == 4  # the blank line has no result
    part = tmp_path / "part.jsonl"
    part.write_text(done[0] + "\n" + done[1] + "\n" + done[2][:7], encoding="utf-8")
    assert score_file(str(src), str(part), quiet=True, resume=True) == 0
    assert part.read_text(encoding="utf-8") == full.read_text(encoding="utf-8")
    assert score_file(str(src), str(tmp_path / "new.jsonl"), quiet=True, resume=True) == 0
    assert (tmp_path / "new.jsonl").read_text(encoding="utf-8") == full.read_text(encoding="utf-8")
