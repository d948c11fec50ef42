"""A headless Chromium driven through Playwright, showing MiniWoB++ task pages.

``Browser`` starts the system Chromium (Debian's ``chromium``; Playwright's own browser
downloads are never used) with a fresh profile in a temporary directory and one page, and offers
what the collector needs: open a task page for a seed, read the accessibility tree (CDP
``Accessibility.getFullAXTree``, serialised by ``rlvr_world.web.axtree``) once the page stops
changing, click an element or type into it with real mouse and keyboard events, and read the
episode's end and reward from MiniWoB's globals.

Errors are typed so the collector can record them as failures: ``PageLoadFailed`` (navigation
error, or the page has no MiniWoB ``core``), ``BrowserCrashed`` (the renderer or the browser went
away; the ``Browser`` is unusable after it), ``ActionUnavailable`` (the element has no box on
screen to click). What it does not do: choose actions, write files, or restart itself.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from rlvr_world.web.axtree import AxSnapshot, EpisodeIds, serialise_ax_tree

logger = logging.getLogger(__name__)

__all__ = [
    "CHROMIUM_ARGS",
    "ActionUnavailable",
    "Browser",
    "BrowserCrashed",
    "BrowserSettings",
    "PageLoadFailed",
]

#: No sandbox (containers run as root), no GPU, and nothing that talks to the network by itself.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
)
#: MiniWoB's own display around the task (last reward, countdown, click marks, start cover).
HUD_ELEMENT_IDS = ("reward-display", "click-canvas", "sync-task-cover")
#: The episode timer, in ms: long enough that a slow machine never ends an episode by time.
EPISODE_MAX_MS = 3_600_000


class PageLoadFailed(Exception):
    """The task page did not load or is not a MiniWoB++ task page."""


class BrowserCrashed(Exception):
    """The page's renderer or the browser died; this ``Browser`` cannot be used any more."""


class ActionUnavailable(Exception):
    """The element cannot be acted on (no box on screen, detached)."""


@dataclass(frozen=True)
class BrowserSettings:
    """How the browser is started and how long it is waited for."""

    executable: Path = Path("/usr/bin/chromium")
    page_timeout_s: float = 30.0  # navigation and task start
    settle_s: float = 0.3  # the tree must stay the same this long after an action
    max_settle_s: float = 5.0  # ... or this long has passed (then the step is "unsettled")
    poll_s: float = 0.05
    width: int = 800
    height: int = 600


class Browser:
    """One Chromium process with a fresh profile and one page (module docstring)."""

    def __init__(self, settings: BrowserSettings) -> None:
        from playwright.sync_api import sync_playwright

        if not settings.executable.is_file():
            raise FileNotFoundError(
                f"Chromium not found at {settings.executable}: install Debian's chromium "
                "(scripts/setup_chromium.sh) or pass --chromium PATH"
            )
        self.settings = settings
        self.crashed = False
        self._profile = Path(tempfile.mkdtemp(prefix="rlvr-chromium-"))
        self._pw = sync_playwright().start()
        try:
            self._context = self._pw.chromium.launch_persistent_context(
                str(self._profile),
                executable_path=str(settings.executable),
                headless=True,
                args=list(CHROMIUM_ARGS),
                viewport={"width": settings.width, "height": settings.height},
            )
            self._page = self._context.pages[0] if self._context.pages else self._context.new_page()
            self._page.on("crash", self._on_crash)
            self._cdp = self._context.new_cdp_session(self._page)
        except Exception:
            self._pw.stop()
            shutil.rmtree(self._profile, ignore_errors=True)
            raise
        self._exclude: frozenset[int] = frozenset()

    def _on_crash(self, _page: Any) -> None:
        logger.warning("the page's renderer crashed")
        self.crashed = True

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Stop the browser and remove its profile; safe after a crash and twice."""
        try:
            self._context.close()
        except Exception as exc:  # a crashed browser may refuse; the process goes with stop()
            logger.debug("closing the browser context: %s", exc)
        try:
            self._pw.stop()
        finally:
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @contextmanager
    def _guard(self, failure: type[Exception]) -> Iterator[None]:
        """Turn Playwright errors into ``BrowserCrashed`` (if the page is gone) or ``failure``."""
        from playwright.sync_api import Error

        if self.crashed:
            raise BrowserCrashed("the page crashed earlier")
        try:
            yield
        except Error as exc:
            message = str(exc).split("\n", 1)[0]
            gone = self._page.is_closed() or any(
                word in message.lower() for word in ("crash", "closed", "disconnected")
            )
            if self.crashed or gone:
                self.crashed = True
                raise BrowserCrashed(message) from exc
            raise failure(message) from exc

    # ------------------------------------------------------------------ task pages

    def start_task(self, url: str, seed: str) -> str:
        """Load a task page, seed its random numbers, start an episode; returns the objective."""
        with self._guard(PageLoadFailed):
            self._page.goto(url, wait_until="load", timeout=self.settings.page_timeout_s * 1000)
            if not self._page.evaluate(
                "typeof core === 'object' && typeof genProblem === 'function' "
                "&& typeof Math.seedrandom === 'function'"
            ):
                raise PageLoadFailed(f"{url}: no MiniWoB core (core.js missing or failed to run)")
            try:
                self._page.evaluate(
                    "([seed, maxMs]) => { Math.seedrandom(seed); core.EPISODE_MAX_TIME = maxMs;"
                    " core.startEpisodeReal(); }",
                    [seed, EPISODE_MAX_MS],
                )
            except Exception as exc:
                if self.crashed:
                    raise
                raise PageLoadFailed(f"{url}: the task script failed: {exc}") from exc
            deadline = time.monotonic() + self.settings.page_timeout_s
            while not self._page.evaluate("WOB_TASK_READY === true"):
                if time.monotonic() > deadline:
                    raise PageLoadFailed(f"{url}: the task never became ready")
                time.sleep(self.settings.poll_s)
            self._exclude = frozenset(self._hud_backend_ids())
            objective = self._page.evaluate("core.getUtterance()")
        return str(objective)

    def _hud_backend_ids(self) -> list[int]:
        ids = []
        for element_id in HUD_ELEMENT_IDS:
            found = self._cdp.send(
                "Runtime.evaluate", {"expression": f"document.getElementById('{element_id}')"}
            )
            object_id = found.get("result", {}).get("objectId")
            if object_id is None:
                continue
            node = self._cdp.send("DOM.describeNode", {"objectId": object_id})["node"]
            ids.append(int(node["backendNodeId"]))
        return ids

    def episode_state(self) -> tuple[bool, float]:
        """``(done, raw reward)`` of the current episode."""
        with self._guard(BrowserCrashed):
            done, reward = self._page.evaluate("[WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL]")
        return bool(done), float(reward)

    # ------------------------------------------------------------------ trees

    def _nodes(self) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = self._cdp.send("Accessibility.getFullAXTree")["nodes"]
        return nodes

    def snapshot(
        self, ids: EpisodeIds, replacements: Sequence[tuple[str, str]] = ()
    ) -> tuple[AxSnapshot, bool]:
        """The tree once it has not changed for ``settle_s``; ``(tree, settled)``.

        Polling compares trees by Chromium's node ids, so elements that come and go while the
        page settles take no episode ids; only the final tree is numbered with ``ids``."""
        s = self.settings
        with self._guard(BrowserCrashed):
            start = time.monotonic()
            nodes = self._nodes()
            key = _signature(nodes, self._exclude)
            stable_since = start
            while True:
                now = time.monotonic()
                if now - stable_since >= s.settle_s:
                    settled = True
                    break
                if now - start >= s.max_settle_s:
                    settled = False
                    break
                time.sleep(s.poll_s)
                nodes = self._nodes()
                new_key = _signature(nodes, self._exclude)
                if new_key != key:
                    key, stable_since = new_key, time.monotonic()
        tree = serialise_ax_tree(nodes, ids, exclude=self._exclude, replacements=replacements)
        return tree, settled

    # ------------------------------------------------------------------ actions

    def _centre(self, backend_id: int) -> tuple[float, float]:
        with self._guard(ActionUnavailable):
            self._cdp.send("DOM.scrollIntoViewIfNeeded", {"backendNodeId": backend_id})
            quads = self._cdp.send("DOM.getContentQuads", {"backendNodeId": backend_id})["quads"]
        for quad in quads:
            xs, ys = quad[0::2], quad[1::2]
            if max(xs) - min(xs) >= 1 and max(ys) - min(ys) >= 1:
                x, y = sum(xs) / 4, sum(ys) / 4
                if 0 <= x < self.settings.width and 0 <= y < self.settings.height:
                    return x, y
        raise ActionUnavailable(f"element {backend_id} has no box inside the viewport")

    def click(self, backend_id: int) -> None:
        """A real mouse click at the centre of the element's first box."""
        x, y = self._centre(backend_id)
        with self._guard(BrowserCrashed):
            self._page.mouse.click(x, y)

    def type_text(self, backend_id: int, text: str, enter: bool) -> None:
        """Click the element, type ``text`` key by key, then Enter if asked."""
        self.click(backend_id)
        with self._guard(BrowserCrashed):
            self._page.keyboard.type(text)
            if enter:
                self._page.keyboard.press("Enter")

    def crash_page(self) -> None:
        """Crash the page's renderer (CDP ``Page.crash``): how the collector's crash handling is
        exercised on a real browser."""
        from playwright.sync_api import Error

        try:
            self._cdp.send("Page.crash")
        except Error as exc:  # the session dies with the renderer
            logger.debug("Page.crash: %s", exc)
        deadline = time.monotonic() + self.settings.page_timeout_s
        while not self.crashed and time.monotonic() < deadline:
            self._page.wait_for_timeout(50) if not self._page.is_closed() else None
            time.sleep(self.settings.poll_s)


def _signature(nodes: Sequence[dict[str, Any]], exclude: frozenset[int]) -> tuple[str, ...]:
    """What decides whether the tree changed: every shown line with Chromium's own ids."""
    tree = serialise_ax_tree(nodes, EpisodeIds(), exclude=exclude)
    return tuple(
        f"{line.backend_id}/{line.depth}/{line.text.split(' ', 1)[1]}" for line in tree.lines
    )
