"""``python -m services.decoder``: the same as ``rlvr-world serve decoder``."""

from __future__ import annotations

import sys

from services.decoder.cli import main

if __name__ == "__main__":
    sys.exit(main())
