"""``rlvr-world run`` with ``task: video``: the video world model from data to RLVR.

* ``config``: the pydantic run configuration;
* ``pipeline``: ``VideoRun``, every phase in order (data, tokenizer, MLE, RLVR, baseline, report);
* ``episodes``: the run's episodes (recorded or read) and the clips cut from them;
* ``rl``: the RLVR phase: services, queue-fed trainer and orchestrator, and their settings;
* ``report``: ``report.md`` and its pictures.

The model code it composes (tokenizer, transformer, layouts, training, evaluation) is the core's
``rlvr_world.video``.
"""
