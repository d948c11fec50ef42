"""``rlvr-world run`` for ``task: mpc`` and ``task: policy_eval`` (``rlvr_world.mpc``)."""
