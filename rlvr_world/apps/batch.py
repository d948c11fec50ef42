"""Batch scoring of JSON Lines files (``rlvr-world reward score``).

Reads verl-style requests one per line and writes one result per line in the same order. A line
that is not a JSON object, or whose fields are wrong, gets an ``invalid_input`` line naming the
line number and the field; every other line is still scored. Scoring happens in this process, or
through a running reward service with ``server`` (a gRPC address; needs the ``reward`` extra).

``resume``: continue an output file that a run stopped early (the service went away or refused
the call, e.g. without its token: exit code 2 and a message saying what to set; or the process was
killed). The output holds one line per non-blank input line, in order, so its
complete lines say how far the run got: those input lines are skipped, a partial last line (cut
mid-write) is dropped, and the new results are appended. Resuming a finished file scores nothing.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import grpc

from rlvr_world.rewards.dispatch import DATA_SOURCE_TO_TASK, score_mapping
from rlvr_world.rewards.types import RewardResult, Status, failed

#: Longest input line accepted, in bytes of UTF-8 (a longer one gets an invalid_input line).
MAX_LINE_BYTES = 16 * 1024 * 1024


class BatchAborted(RuntimeError):
    """The reward service went away or refused the call mid-file: results up to ``lineno - 1``
    were written."""

    def __init__(self, lineno: int, cause: object, when: str = "once the service is back") -> None:
        self.lineno = lineno
        super().__init__(
            f"stopped at line {lineno}: {cause}; the results of the lines before it were written, "
            f"rerun the same command with --resume {when}"
        )


def _refusal(lineno: int, err: Any) -> BatchAborted:
    """A call the service refused for every line alike (``grpc.RpcError`` that is neither
    retryable nor a bad request: a missing token, a wrong one, an unknown method)."""
    code = err.code()
    cause = f"the reward service refused the call: {code.name}: {err.details()}"
    if code.name == "UNAUTHENTICATED":
        return BatchAborted(
            lineno, cause, "with the service's token in RLVR_API_TOKEN (or RLVR_REWARD_API_TOKEN)"
        )
    return BatchAborted(lineno, cause, "once that is fixed")


@dataclass
class Summary:
    """Counts for the closing report of a batch run."""

    lines: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    reward_sum: dict[str, float] = field(default_factory=dict)
    count_by_task: Counter[str] = field(default_factory=Counter)

    def add(self, task: str, result: RewardResult) -> None:
        self.lines += 1
        self.by_status[result.status.value] += 1
        if result.status is Status.OK:
            self.reward_sum[task] = self.reward_sum.get(task, 0.0) + result.reward
            self.count_by_task[task] += 1

    def render(self, seconds: float) -> str:
        rate = self.lines / seconds if seconds > 0 else float("inf")
        status = ", ".join(f"{k}={v}" for k, v in sorted(self.by_status.items()))
        lines = [f"scored {self.lines} lines in {seconds:.2f}s ({rate:.1f}/s): {status}"]
        for task, n in sorted(self.count_by_task.items()):
            mean = self.reward_sum[task] / n
            lines.append(f"  {task}: {n} ok, mean reward {mean:.4f}")
        return "\n".join(lines)


def parse_line(lineno: int, line: str) -> Mapping[str, Any] | RewardResult:
    """The request object of one line, or the error result for it."""
    if len(line.encode("utf-8", errors="replace")) > MAX_LINE_BYTES:
        return failed(Status.INVALID_INPUT, f"line {lineno}: longer than {MAX_LINE_BYTES} bytes")
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        return failed(Status.INVALID_INPUT, f"line {lineno}: malformed JSON: {exc}")
    except RecursionError:
        return failed(Status.INVALID_INPUT, f"line {lineno}: JSON nested too deeply")
    if not isinstance(row, dict):
        kind = type(row).__name__
        return failed(Status.INVALID_INPUT, f"line {lineno}: expected a JSON object, got {kind}")
    return row


def _with_default_variant(row: Mapping[str, Any], variant: str | None) -> Mapping[str, Any]:
    if variant is None or "variant" in row:
        return row
    return {**row, "variant": variant}


def _task_name(row: Mapping[str, Any]) -> str:
    source = row.get("data_source")
    return DATA_SOURCE_TO_TASK.get(source, "unknown") if isinstance(source, str) else "unknown"


def _located(lineno: int, result: RewardResult) -> RewardResult:
    if result.status is Status.OK or result.message.startswith("line "):
        return result
    return RewardResult(
        reward=result.reward,
        status=result.status,
        metrics=result.metrics,
        message=f"line {lineno}: {result.message}",
    )


def score_lines(
    lines: Iterable[str],
    *,
    variant: str | None = None,
    server: str | None = None,
    skip: int = 0,
) -> Iterator[tuple[str, RewardResult]]:
    """Yield ``(task, result)`` per non-blank input line, in order, after the first ``skip``."""
    client = _connect(server) if server else None
    try:
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            if skip > 0:
                skip -= 1
                continue
            parsed = parse_line(lineno, line)
            if isinstance(parsed, RewardResult):
                yield "unknown", parsed
                continue
            row = _with_default_variant(parsed, variant)
            if client is None:
                result = score_mapping(row)
            else:
                try:
                    result = client.score_verl(row)
                except ConnectionError as exc:  # RewardServiceUnavailable: every retry failed
                    raise BatchAborted(lineno, exc) from exc
                except grpc.RpcError as exc:  # refused whatever the line: no point going on
                    raise _refusal(lineno, exc) from exc
            yield _task_name(row), _located(lineno, result)
    finally:
        if client is not None:
            client.close()


def _connect(server: str) -> Any:
    try:
        from rlvr_world.wire.reward import RewardClient
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise SystemExit(
            f"--server needs the reward extra (pip install 'rlvr-world[reward]'): {exc}"
        ) from exc
    return RewardClient(server)


@contextmanager
def _open(path: str, mode: str) -> Iterator[IO[str]]:
    if path == "-":
        yield sys.stdin if "r" in mode else sys.stdout
        return
    if "w" in mode or "a" in mode:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode, encoding="utf-8", errors="replace") as fh:
        yield fh


def done_lines(output_path: str) -> int:
    """Complete lines of an output file to resume; a partial last line is cut off the file."""
    path = Path(output_path)
    if not path.exists():
        return 0
    with path.open("rb+") as fh:
        data = fh.read()
        keep = data.rfind(b"\n") + 1  # 0 when no line is complete
        if keep < len(data):
            fh.truncate(keep)
    return data[:keep].count(b"\n")


def score_file(
    input_path: str,
    output_path: str,
    *,
    server: str | None = None,
    variant: str | None = None,
    quiet: bool = False,
    resume: bool = False,
) -> int:
    """Score ``input_path`` into ``output_path``; print a summary to stderr.

    Returns 0, or 2 when the reward service (``server``) became unreachable: the lines scored
    before that are written and flushed, and ``resume`` continues from there.
    """
    if resume and output_path == "-":
        raise SystemExit("--resume needs an output file (it reads how far the last run got)")
    skip = done_lines(output_path) if resume else 0
    summary = Summary()
    start = time.perf_counter()
    code = 0
    with _open(input_path, "r") as src, _open(output_path, "a" if resume else "w") as dst:
        try:
            for task, result in score_lines(src, variant=variant, server=server, skip=skip):
                dst.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")
                dst.flush()
                summary.add(task, result)
        except BatchAborted as exc:
            sys.stderr.write(f"error: {exc}\n")
            code = 2
    if not quiet:
        if skip:
            sys.stderr.write(f"resumed after {skip} lines already in {output_path}\n")
        sys.stderr.write(summary.render(time.perf_counter() - start) + "\n")
    return code
