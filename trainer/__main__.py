"""``python -m trainer --config FILE [--resume] [--set key=value]``."""

from trainer.cli import main

raise SystemExit(main())
