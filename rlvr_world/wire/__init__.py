"""The wire: the one place where core values become gRPC messages and back.

* ``codec``: task and status enums, and numpy arrays as ``common.proto`` ``Tensor`` (raw
  little-endian C-order bytes, shape, dtype) in both directions, checked on the way in;
* ``services``: typed async clients of the rollout, decoder and reward services
  (``ServiceClients``, ``Sampling``), used by the orchestrator, the evaluations and the tests;
* the reward service's public client SDK is ``rlvr_world.client`` (sync and async), built on
  ``codec``.

The servers (``services/*``) and every client use these; nothing else encodes a tensor or maps
an enum. The contracts themselves are the ``.proto`` files in ``protos/rlvr_world/v1``.
"""
