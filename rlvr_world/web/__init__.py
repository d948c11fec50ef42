"""Web-page world-model data: from a browser's accessibility tree to training items.

Submodules (import them directly):

* ``axtree``: a CDP ``Accessibility.getFullAXTree`` node list as WebArena tree text, with ids
  numbered per episode.
* ``policy``: the seeded random exploration policy of the collector (which element, which text).
* ``dataset``: task names and families, de-duplication, the split by task, the token-length
  filter.
* ``items``: ``PromptItem``s of web transitions (de-duplicated, split by task, length-filtered)
  and the F1 evaluation split into unchanged and changed transitions.

Pure code: no browser, no services. The browser driving lives in the application layer
(``rlvr_world.apps.collect``); tree diffs, transition records and the prompt (the paper's, and a
compact one) in ``rlvr_world.tasks.web``.
"""
