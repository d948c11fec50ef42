"""Data collectors: ``rlvr-world collect web`` records MiniWoB++ transitions in headless Chromium.

Modules: ``browser`` (Chromium through Playwright), ``episodes`` (one recorded episode),
``web`` (the resumable run over tasks and episodes, and its output directory), ``cli``.
"""
