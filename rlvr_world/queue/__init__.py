"""Scored-group queue: wire schema (``schema``), embedded/external Redis (``server``) and the
Redis Streams producer/consumer (``stream``).

Imports nothing from the trainer. ``schema`` is pure (pydantic only); ``server`` and ``stream``
import ``redis``. Import the submodules directly.
"""
