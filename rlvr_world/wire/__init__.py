"""The wire: the one place where core values become gRPC messages and back.

* ``codec``: task and status enums, and numpy arrays as ``common.proto`` ``Tensor`` (raw
  little-endian C-order bytes, shape, dtype) in both directions, checked on the way in;
* ``reward``: the reward service's client SDK (sync and async, retries, fail-over), public as
  ``rlvr_world.client``;
* ``services``: typed async clients of the rollout, decoder and reward services
  (``ServiceClients``, ``Sampling``), used by the orchestrator, the evaluations and the tests.

The servers (``services/*``) and every client use these; nothing else encodes a tensor or maps
an enum. The contracts themselves are the ``.proto`` files in ``protos/rlvr_world/v1``.
"""
