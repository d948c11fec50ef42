"""Plain functions and constants shared by test modules (fixtures live in ``conftest.py``).

* ``shared``: the optional folder of golden files and real data (``RLVR_SHARED_DIR``), JSON Lines;
* ``tiny_lm``: the tiny causal LM of the service tests, built by ``rlvr_world.tiny_model``;
* ``rollout``: rollout-service requests, the teacher-forced log-prob check, the refused requests;
* ``reward``: example reward requests and the reward service's test token.

No test module imports another test module: what two of them share is here.
"""
