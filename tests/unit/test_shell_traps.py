"""Shell scripts: a ``trap ... RETURN`` must clear itself.

bash keeps a RETURN trap after the function that set it returns, so it fires again when any later
function returns, where the function's locals are gone: under ``set -u`` that is an "unbound
variable" exit. ``deploy/build-images.sh`` failed that way on every machine without the
debootstrap base image (2026-12-04, FINDINGS). The first test shows the failure with bash itself;
the second checks that every RETURN trap in the repository's scripts clears itself as it fires.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
set -euo pipefail
make_dir() {{ local rootfs; rootfs=$(mktemp -d); trap {trap} RETURN; }}
later() {{ :; }}
main() {{ make_dir; later; }}
main
echo finished
"""


def _run(trap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", SCRIPT.format(trap=trap)], capture_output=True, text=True, check=False
    )


def test_a_return_trap_that_stays_breaks_a_later_return_and_one_that_clears_itself_does_not() -> (
    None
):
    stays = _run("""'rm -rf -- "$rootfs"'""")
    assert stays.returncode != 0
    assert "rootfs: unbound variable" in stays.stderr
    clears = _run("""'rm -rf -- "$rootfs"; trap - RETURN'""")
    assert clears.returncode == 0, clears.stderr
    assert clears.stdout.strip() == "finished"


def test_every_return_trap_in_the_scripts_clears_itself() -> None:
    scripts = [p for p in ROOT.rglob("*.sh") if ".venv" not in p.parts]
    traps = [
        (path, line)
        for path in scripts
        for line in path.read_text().splitlines()
        if re.search(r"^\s*trap\s.*\sRETURN\s*$", line)
    ]
    assert traps, "expected deploy/build-images.sh's RETURN trap"
    for path, line in traps:
        assert "trap - RETURN" in line, f"{path.relative_to(ROOT)}: {line.strip()}"
