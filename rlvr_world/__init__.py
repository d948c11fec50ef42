"""RLVR-World: post-train world models with reinforcement learning from verifiable rewards.

Core library shared by the services and the trainer: pure reward scorers (``rlvr_world.rewards``),
GRPO maths, task formats, the world-model code, the queue schema, service clients and generated
wire stubs (``rlvr_world.v1``). Modules that score import no grpc, fastapi, redis or vllm. The core
imports neither ``services``, ``trainer`` nor the application layer ``rlvr_world.apps`` (the CLI,
the ``run`` pipelines, the orchestrator, the supervisor), which composes all of them.
"""

__version__ = "0.1.0"
