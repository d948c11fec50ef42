"""Orchestrator / rollout worker: dataset prompts -> rollout -> decoder -> reward -> scored groups.

* ``clients``: the rollout, decoder and reward gRPC clients of one run;
* ``retry``: exponential backoff for calls to services that may be down;
* ``ledger``: the JSON Lines ledger where every prompt ends as ``pushed`` or ``failed``;
* ``metrics``: Prometheus metrics ``rlvr_orchestrator_*``;
* ``config``: ``OrchestratorConfig``, the worker's settings;
* ``worker``: the asyncio ``Orchestrator`` itself.

The prompts it feeds are ``rlvr_world.items.PromptItem``s (core). Import the submodules directly;
``worker`` imports grpc and redis.
"""
