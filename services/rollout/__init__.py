"""Rollout service: gRPC ``RolloutService`` (Generate, LoadWeights, Info) over a generation engine.

Start it with ``rlvr-world serve rollout`` or ``python -m services.rollout``. The engine protocol is
in ``engine.py``; the transformers implementation in ``transformers_engine.py``. Heavy modules
(grpc, torch, transformers) are imported by the submodules, not by this package.
"""
