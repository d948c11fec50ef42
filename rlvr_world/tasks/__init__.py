"""World-model tasks: data loading, targets and prompts for the language world models.

* ``rlvr_world.tasks.text_game``: ByteSized32 / GPT-simulator text-game state prediction
  (transition records, state-diff targets, the paper's prompt, a compact prompt, verl rows).
* ``rlvr_world.tasks.web``: accessibility-tree web-page transitions (tree diffs and prompts).

Pure code: no services, no training. Callers pass the data paths (nothing is downloaded here).
"""
