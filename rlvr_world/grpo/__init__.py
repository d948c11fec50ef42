"""GRPO math as verl's ``core_algos`` implements it (pure torch, no I/O).

``advantage``: group-normalised outcome advantage. ``loss``: KL estimators, loss aggregation,
clipped policy loss with dual-clip, entropy. ``groups``: scored groups -> per-sample advantages,
excluding failed samples and dropping groups with fewer than two valid samples.
"""
