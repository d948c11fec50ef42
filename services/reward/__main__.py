"""``python -m services.reward``: the same as ``rlvr-world serve reward``."""

from __future__ import annotations

import sys

from services.reward.cli import main

if __name__ == "__main__":
    sys.exit(main())
