"""What every run type (text, web, video, MPC) shares, below the run types themselves.

* ``configfile``: a run's YAML file and its ``--set section.field=value`` overrides;
* ``stack``: the local service stack (reward, decoder, rollout, trainer) under a supervisor;
* ``grpo``: the shared ``rl`` section, the trainer's and the orchestrator's settings from it,
  and the GRPO phase (feed the services into the stream until the trainer is done).

The run types (``apps.pipeline`` for text and web, ``apps.video``, ``apps.mpc``) import this
package; it imports none of them (import-linter checks it), and ``apps.commands`` dispatches
``rlvr-world run`` and ``pool`` to them.
"""
