"""Run one fuzz target under atheris (libFuzzer) for a fixed time: ``python -m tests.fuzz.run
TARGET --seconds N [--out DIR]``.

The seed corpus (``tests/fuzz/corpus/TARGET``) is read, never written: new inputs go to
``OUT/corpus`` and crashing inputs to ``OUT/artifacts`` (``OUT`` a fresh temporary folder unless
given). libFuzzer prints its statistics at the end (``stat::number_of_executed_units``); the exit
status is 0 when nothing crashed. An input that takes over 30 s counts as a crash (a hang).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"
#: Modules whose code coverage guides the fuzzer.
INSTRUMENTED = ["rlvr_world", "services", "tests.fuzz", "json_repair", "dirtyjson"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.run")
    parser.add_argument("target", choices=("rawbatch", "text_game", "web"))
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix=f"fuzz-{args.target}-"))
    (out / "corpus").mkdir(parents=True, exist_ok=True)
    (out / "artifacts").mkdir(parents=True, exist_ok=True)
    import atheris

    with atheris.instrument_imports(include=INSTRUMENTED):
        from tests.fuzz.targets import TARGETS
    flags = [
        f"-max_total_time={args.seconds}",
        "-print_final_stats=1",
        "-timeout=30",
        "-max_len=4096",
        "-rss_limit_mb=4096",
        f"-artifact_prefix={out / 'artifacts'}/",
    ]
    print(f"fuzzing {args.target} for {args.seconds}s; new inputs in {out}", file=sys.stderr)
    atheris.Setup([sys.argv[0], *flags, str(out / "corpus"), str(CORPUS / args.target)],
                  TARGETS[args.target])  # fmt: skip
    atheris.Fuzz()


if __name__ == "__main__":
    main()
