"""Web-page world-model data: from a browser's accessibility tree to training items.

Submodules (import them directly):

* ``axtree``: a CDP ``Accessibility.getFullAXTree`` node list as WebArena tree text, with ids
  numbered per episode.
* ``policy``: the seeded random exploration policy of the collector (which element, which text).
* ``dataset``: task names and families, de-duplication, the split by task, the token-length
  filter.
* ``prompt``: the paper's web-state prediction prompt.
* ``items``: ``PromptItem``s of web transitions and the F1 evaluation split into unchanged and
  changed transitions.

Pure code: no browser, no services. The browser driving lives in the application layer
(``rlvr_world.apps.collect``); tree diffs and transition records in ``rlvr_world.tasks.web``.
"""
