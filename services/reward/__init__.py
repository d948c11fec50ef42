"""Reward service: gRPC ``RewardService`` + FastAPI gateway + Prometheus metrics over the scorers.

Start it with ``rlvr-world serve reward`` or ``python -m services.reward``; see ``README.md`` here.
Heavy modules (grpc, fastapi, torch) are imported by the submodules, not by this package.
"""
