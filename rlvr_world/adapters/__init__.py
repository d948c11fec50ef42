"""Drop-in adapters that point other RL libraries at the reward service.

* ``rlvr_world.adapters.verl``: ``custom_reward_function.path`` for verl (async ``compute_score``).
* ``rlvr_world.adapters.trl``: a ``reward_funcs`` callable for TRL's GRPOTrainer.
* OpenRLHF and slime need no code: ``--reward.remote_url http://HOST:PORT/get_reward`` and
  ``--rm-url http://HOST:PORT/slime/reward`` (``services/reward/http``).

All follow one rule (docs/integrations.md#one-rule-for-failures): an unparseable answer scores the
configured low reward (default 0); a failure of the service or the caller's data is the library's
"no verdict" or an error, logged (docs/integrations.md). They import no torch: ``pip install
'rlvr-world[client]'`` is enough.
"""
