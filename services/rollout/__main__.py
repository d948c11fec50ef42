"""``python -m services.rollout``: the same as ``rlvr-world serve rollout``."""

from __future__ import annotations

import sys

from services.rollout.cli import main

if __name__ == "__main__":
    sys.exit(main())
