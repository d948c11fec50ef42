"""Errors the trainer adapters raise, in an importable module of their own.

verl loads ``adapters/verl.py`` by file path (as ``custom_module_<hash>``), so an exception class
defined there cannot be rebuilt in verl's driver process when a Ray worker raises it; defined here
it travels back through ``ray.get`` as itself. Each takes one message, so it pickles.
"""

from __future__ import annotations


class RewardNotScored(RuntimeError):
    """The service could not score a sample for a reason that is not the policy's (status
    ``invalid_input``, ``timeout`` or ``error``), and the adapter has no fallback value for it."""
