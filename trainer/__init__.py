"""GRPO trainer fed by the scored-group Redis Stream (see ``trainer.loop``).

Entry points: ``rlvr-world train`` (``trainer.cli.add_train_parser`` / ``run_train``) and
``python -m trainer``. Heavy modules (torch, transformers) load only when training starts.
"""
