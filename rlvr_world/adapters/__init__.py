"""Drop-in adapters that point other RL libraries at the reward service.

* ``rlvr_world.adapters.verl``: ``custom_reward_function.path`` for verl (async ``compute_score``).
* ``rlvr_world.adapters.trl``: a ``reward_funcs`` callable for TRL's GRPOTrainer.
* OpenRLHF needs no code: ``--remote_rm_url http://HOST:PORT/get_reward``
  (see services/reward/README.md).
"""
