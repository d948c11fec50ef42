"""RLVR-World: post-train world models with reinforcement learning from verifiable rewards.

Core library shared by the services and the trainer: pure reward scorers (``rlvr_world.rewards``),
generated wire stubs (``rlvr_world.v1``) and the CLI. Modules that score import no grpc, fastapi,
redis or vllm.
"""

__version__ = "0.1.0"
