"""The video world model: data, action tokens, sequence layouts, frame tokenizer, transformer.

Submodules (import them directly): ``actions`` (action quantisation), ``layout`` (single- and
multi-step sequences), ``data`` (episodes and clips), ``pusht`` (recording PushT trajectories with
``gym-pusht``), ``tokenizer`` (per-frame FSQ tokenizer and the compressive option),
``world_model`` / ``train_mle`` / ``evaluate`` (the LLaMA-style
transformer over frame and action tokens).
"""
