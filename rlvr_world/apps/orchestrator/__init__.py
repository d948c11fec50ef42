"""Orchestrator / rollout worker: dataset prompts -> rollout -> decoder -> reward -> scored groups.

* ``items``: ``PromptItem`` (prompt, ground truth, extra info) built from the task builders;
* ``retry``: exponential backoff for calls to services that may be down;
* ``ledger``: the JSON Lines ledger where every prompt ends as ``pushed`` or ``failed``;
* ``metrics``: Prometheus metrics ``rlvr_orchestrator_*``;
* ``worker``: the asyncio ``Orchestrator`` itself.

Import the submodules directly; ``worker`` imports grpc and redis.
"""
