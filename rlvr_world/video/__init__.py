"""The video world model: data, action tokens, sequence layouts, frame tokenizer, transformer.

Submodules (import them directly): ``actions`` (action quantisation, REFERENCE.md §3.2),
``layout`` (single- and multi-step sequences, §3.4), ``data`` (episodes and clips), ``pusht``
(recording PushT trajectories with ``gym-pusht``), ``tokenizer`` (per-frame FSQ tokenizer and the
compressive option, §3.3), ``world_model`` / ``train_mle`` / ``evaluate`` (the LLaMA-style
transformer over frame and action tokens).
"""
