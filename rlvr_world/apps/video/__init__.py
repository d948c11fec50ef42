"""``rlvr-world run`` with ``task: video``: the video world model from data to RLVR.

* ``config`` (and ``sections``: its ``rl`` and ``idm`` sections): the pydantic run configuration;
* ``pipeline``: ``VideoRun``, every phase in order (data, IDM, tokenizer, MLE, RLVR, baseline,
  report);
* ``episodes``: the run's episodes (recorded or read) and the clips cut from them;
* ``idm_phase``, ``mle_phase``: the run's inverse-dynamics model and its start model;
* ``rl``: the RLVR phase: services, queue-fed trainer and orchestrator, and their settings;
* ``reading``: whether a model reads its actions (the measures of every evaluation, the
  ``action_reading`` headline);
* ``report``: ``report.md`` and its pictures;
* ``sweep`` (and ``sweep_control``: one control for all arms), ``best_of_k``, ``pool``: the
  analyses of finished runs.

The model code it composes (tokenizer, transformer, layouts, training, evaluation) is the core's
``rlvr_world.video``.
"""
