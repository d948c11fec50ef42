"""``python -m tests.helpers.gated_rollout ARGS``: the rollout service of ``python -m
services.rollout ARGS`` in which every generation waits at a gate that the test opens.

Each ``TransformersEngine.generate`` call writes ``GATE_REACHED`` to stderr, then blocks its engine
thread until a line arrives on stdin, then generates as usual. A test can thus hold a ``Generate``
call in flight for as long as it likes (send a signal, watch the drain) and decide when it ends:
the order of events is the test's, not the machine's speed. Everything else is the real service:
its own process, command line, signal handling, drain, gRPC over loopback, the model.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from services.rollout.cli import main
from services.rollout.engine import Generation, SamplingParams
from services.rollout.transformers_engine import TransformersEngine

#: What the service writes to stderr when a generation reaches the gate.
GATE_REACHED = "generation waiting at the test gate"

_generate = TransformersEngine.generate


def _gated_generate(
    self: TransformersEngine, prompt: str | Sequence[int], params: SamplingParams
) -> Generation:
    sys.stderr.write(GATE_REACHED + "\n")
    sys.stderr.flush()
    if not sys.stdin.readline():
        raise RuntimeError("the test closed the gate's stdin without opening it")
    return _generate(self, prompt, params)


if __name__ == "__main__":
    TransformersEngine.generate = _gated_generate  # type: ignore[method-assign]
    sys.exit(main())
