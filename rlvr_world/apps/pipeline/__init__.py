"""The one-command language world-model pipeline (``rlvr-world run CONFIG``).

* ``config``: the pydantic run configuration;
* ``data``: the prompt items (the synthetic kitchen game, ``rlvr_world.tasks.text_game.kitchen``,
  or GPT-simulator records);
* ``stack``: the service processes under a supervisor;
* ``runner``: starts Redis and the services, SFT, evaluation, orchestrator + trainer, report.

The tiny model it trains by default is built by ``rlvr_world.tiny_model`` (core).
"""
