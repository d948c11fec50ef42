"""The README as a new user meets it: short, in order, and every command in it runs as written.

The query section is run for real: the README's own ``serve reward`` line starts the service (on
free ports), each ``curl`` block runs in bash, and its answer must match the JSON block printed
under it (status and reward exactly as shown, and every metric shown); the Python client snippet
runs and prints what its comment says. The long commands (``make run``, ``make test``, the
deployment) are checked for what can be checked quickly: the Makefile targets, scripts and
configs they name exist, and the shell scripts parse.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_CHARS = 12_000
SECTIONS = [
    "Topology",
    "Query the reward service",
    "Use it from your trainer",
    "Deploy",
    "Configs",
    "Results",
    "Limits, and where to go next",
]
TOKEN = "readme-test-token"


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    section: str


def _blocks(text: str) -> list[Block]:
    blocks, section = [], ""
    lines = iter(text.splitlines())
    for line in lines:
        if line.startswith("## "):
            section = line[3:].strip()
        if line.startswith("```"):
            lang, body = line[3:].strip(), []
            for inner in lines:
                if inner.startswith("```"):
                    break
                body.append(inner)
            blocks.append(Block(lang, "\n".join(body), section))
    return blocks


def _readme_blocks() -> list[Block]:
    return _blocks(README.read_text(encoding="utf-8"))


def test_the_readme_is_a_short_product_page_with_its_sections_in_order() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text) <= MAX_CHARS, f"README.md is {len(text)} characters (at most {MAX_CHARS})"
    headings = [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]
    assert headings == SECTIONS
    first = _readme_blocks()[0]
    assert [line.split("#")[0].strip() for line in first.text.splitlines()] == [
        "make run",
        "make test",
    ]


def _make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(r"^([A-Za-z][\w-]*):", makefile, re.MULTILINE)}


def test_the_long_commands_name_targets_scripts_and_configs_that_exist() -> None:
    assert {"run", "test"} <= _make_targets()
    text = README.read_text(encoding="utf-8")
    for path in re.findall(r"`((?:configs|deploy|scripts)/[^`*\s]+)`", text):
        for one in path.split(", "):
            assert (ROOT / one).exists() or (ROOT / "configs/pipeline" / one).exists(), one
    deploy = next(b for b in _readme_blocks() if b.section == "Deploy")
    for script in re.findall(r"(deploy/\S+\.sh)", deploy.text):
        assert subprocess.run(["bash", "-n", str(ROOT / script)], check=False).returncode == 0
    compose = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    assert re.search(r"^  reward:", compose, re.MULTILINE), "docker compose --scale reward=3"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _local(text: str, grpc_port: int, http_port: int) -> str:
    """The README's commands with this test's ports and interpreter."""
    bindir = str(Path(sys.executable).parent) + "/"
    return (
        text.replace("localhost:8000", f"127.0.0.1:{http_port}")
        .replace("localhost:50051", f"127.0.0.1:{grpc_port}")
        .replace("--grpc-port 50051", f"--grpc-port {grpc_port}")
        .replace("--http-port 8000", f"--http-port {http_port}")
        .replace(".venv/bin/", bindir)
    )


@dataclass(frozen=True)
class Served:
    grpc_port: int
    http_port: int
    env: dict[str, str]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    query = [b for b in _readme_blocks() if b.section == "Query the reward service"]
    serve = next(b for b in query if b.lang == "bash" and "serve reward" in b.text)
    lines = [line for line in serve.text.splitlines() if "serve reward" in line]
    assert len(lines) == 1 and lines[0].rstrip().endswith("&"), lines
    grpc_port, http_port = _free_port(), _free_port()
    argv = shlex.split(_local(lines[0].rstrip().rstrip("&"), grpc_port, http_port))
    env = {**os.environ, "RLVR_API_TOKEN": TOKEN, "RLVR_REWARD_WORKERS": "1"}
    log = tmp_path_factory.mktemp("readme") / "reward.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not _ready(http_port):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the README's service did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield Served(grpc_port, http_port, env)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _ready(http_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=2):
            return True
    except OSError:
        return False


def _answers() -> list[tuple[Block, Block]]:
    blocks = _readme_blocks()
    return [
        (block, blocks[i + 1])
        for i, block in enumerate(blocks[:-1])
        if block.lang == "bash" and "curl" in block.text and blocks[i + 1].lang == "json"
    ]


def _close(got: object, shown: object) -> bool:
    if isinstance(shown, float) and isinstance(got, (int, float)):
        return math.isclose(got, shown, rel_tol=1e-6, abs_tol=1e-9)
    return got == shown


def test_the_readme_shows_three_queries_with_their_answers() -> None:
    assert [b.text.count("curl ") for b, _ in _answers()] == [1, 1, 1]


@pytest.mark.integration
@pytest.mark.parametrize("index", [0, 1, 2], ids=["text_game", "web", "video_npz"])
def test_each_curl_of_the_readme_gets_the_answer_it_shows(
    served: Served, index: int, tmp_path: Path
) -> None:
    command, answer = _answers()[index]
    script = _local(command.text, served.grpc_port, served.http_port)
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=served.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    got, shown = json.loads(out.stdout), json.loads(answer.text)
    for key in ("request_id", "status", "message"):
        assert got[key] == shown[key], key
    assert _close(got["reward"], shown["reward"]), (got["reward"], shown["reward"])
    for name, value in shown["metrics"].items():
        assert _close(got["metrics"][name], value), (name, got["metrics"][name], value)


@pytest.mark.integration
def test_the_python_client_snippet_prints_what_its_comment_says(served: Served) -> None:
    snippet = next(b for b in _readme_blocks() if b.lang == "python")
    expected = re.search(r"print\(.*\)\s*#\s*(.+)$", snippet.text, re.MULTILINE)
    assert expected is not None
    out = subprocess.run(
        [sys.executable, "-c", _local(snippet.text, served.grpc_port, served.http_port)],
        cwd=ROOT,
        env=served.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected.group(1).strip()
