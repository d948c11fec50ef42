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
screen to click). Every browser call has a deadline (``call_timeout_s``): Playwright's CDP
sessions never answer once the renderer is gone, and a page stuck in a script never answers
either; both become ``BrowserCrashed``. Built on Playwright's asyncio API for those deadlines.
What it does not do: choose actions, write files, or restart itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, CDPSession, Page, Playwright

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
T = TypeVar("T")

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
    call_timeout_s: float = 30.0  # any one browser call; past it the browser counts as crashed
    width: int = 800
    height: int = 600


class Browser:
    """One Chromium process with a fresh profile and one page (module docstring).

    Made by ``await Browser.launch(settings)``; ``await close()`` when done."""

    def __init__(
        self,
        settings: BrowserSettings,
        *,
        profile: Path,
        playwright: Playwright,
        context: BrowserContext,
        page: Page,
        cdp: CDPSession,
    ) -> None:
        self.settings = settings
        self.crashed = False
        self._profile = profile
        self._pw = playwright
        self._context = context
        self._page = page
        self._cdp = cdp
        self._exclude: frozenset[int] = frozenset()
        page.on("crash", self._on_crash)

    @classmethod
    async def launch(cls, settings: BrowserSettings) -> Browser:
        """Start Chromium (``FileNotFoundError`` when the binary is missing)."""
        from playwright.async_api import async_playwright

        if not settings.executable.is_file():
            raise FileNotFoundError(
                f"Chromium not found at {settings.executable}: install Debian's chromium "
                "(scripts/setup_chromium.sh) or pass --chromium PATH"
            )
        profile = Path(tempfile.mkdtemp(prefix="rlvr-chromium-"))
        pw = await async_playwright().start()
        try:
            context = await asyncio.wait_for(
                pw.chromium.launch_persistent_context(
                    str(profile),
                    executable_path=str(settings.executable),
                    headless=True,
                    args=list(CHROMIUM_ARGS),
                    viewport={"width": settings.width, "height": settings.height},
                ),
                settings.call_timeout_s,
            )
            page = context.pages[0] if context.pages else await context.new_page()
            cdp = await context.new_cdp_session(page)
        except BaseException:
            await pw.stop()
            shutil.rmtree(profile, ignore_errors=True)
            raise
        return cls(settings, profile=profile, playwright=pw, context=context, page=page, cdp=cdp)

    def _on_crash(self, _page: Any) -> None:
        logger.warning("the page's renderer crashed")
        self.crashed = True

    async def close(self) -> None:
        """Stop the browser and remove its profile; safe after a crash and twice."""
        try:
            await asyncio.wait_for(self._context.close(), self.settings.call_timeout_s)
        except Exception as exc:  # a crashed or stuck browser; stopping the driver ends it
            logger.debug("closing the browser context: %s", exc)
        try:
            await self._pw.stop()
        finally:
            shutil.rmtree(self._profile, ignore_errors=True)

    async def _call(self, awaitable: Awaitable[T], failure: type[Exception]) -> T:
        """Await one browser call with the deadline; Playwright errors become
        ``BrowserCrashed`` (the page or browser is gone) or ``failure``."""
        from playwright.async_api import Error

        if self.crashed:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise BrowserCrashed("the page crashed earlier")
        try:
            return await asyncio.wait_for(awaitable, self.settings.call_timeout_s)
        except TimeoutError:
            self.crashed = True
            raise BrowserCrashed(
                f"no answer from the browser in {self.settings.call_timeout_s:g} s"
            ) from None
        except Error as exc:
            message = str(exc).split("\n", 1)[0]
            gone = self._page.is_closed() or any(
                word in message.lower() for word in ("crash", "closed", "disconnected")
            )
            if self.crashed or gone:
                self.crashed = True
                raise BrowserCrashed(message) from exc
            raise failure(message) from exc

    async def evaluate(self, expression: str, arg: Any = None) -> Any:
        """Run JavaScript in the page (``BrowserCrashed`` if it is gone)."""
        return await self._call(self._page.evaluate(expression, arg), BrowserCrashed)

    # ------------------------------------------------------------------ task pages

    async def start_task(self, url: str, seed: str) -> str:
        """Load a task page, seed its random numbers, start an episode; returns the objective."""
        timeout_ms = self.settings.page_timeout_s * 1000
        await self._call(
            self._page.goto(url, wait_until="load", timeout=timeout_ms), PageLoadFailed
        )
        ready = await self.evaluate(
            "typeof core === 'object' && typeof genProblem === 'function' "
            "&& typeof Math.seedrandom === 'function'"
        )
        if not ready:
            raise PageLoadFailed(f"{url}: no MiniWoB core (core.js missing or failed to run)")
        start = self._page.evaluate(
            "([seed, maxMs]) => { Math.seedrandom(seed); core.EPISODE_MAX_TIME = maxMs;"
            " core.startEpisodeReal(); }",
            [seed, EPISODE_MAX_MS],
        )
        try:
            await self._call(start, PageLoadFailed)
        except PageLoadFailed as exc:
            raise PageLoadFailed(f"{url}: the task script failed: {exc}") from exc
        deadline = time.monotonic() + self.settings.page_timeout_s
        while not await self.evaluate("WOB_TASK_READY === true"):
            if time.monotonic() > deadline:
                raise PageLoadFailed(f"{url}: the task never became ready")
            await asyncio.sleep(self.settings.poll_s)
        self._exclude = frozenset(await self._hud_backend_ids())
        return str(await self.evaluate("core.getUtterance()"))

    async def _send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self._call(self._cdp.send(method, params), BrowserCrashed)
        return result

    async def _hud_backend_ids(self) -> list[int]:
        ids = []
        for element_id in HUD_ELEMENT_IDS:
            found = await self._send(
                "Runtime.evaluate", {"expression": f"document.getElementById('{element_id}')"}
            )
            object_id = found.get("result", {}).get("objectId")
            if object_id is None:
                continue
            node = (await self._send("DOM.describeNode", {"objectId": object_id}))["node"]
            ids.append(int(node["backendNodeId"]))
        return ids

    async def episode_state(self) -> tuple[bool, float]:
        """``(done, raw reward)`` of the current episode."""
        done, reward = await self.evaluate("[WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL]")
        return bool(done), float(reward)

    # ------------------------------------------------------------------ trees

    async def _nodes(self) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = (await self._send("Accessibility.getFullAXTree"))["nodes"]
        return nodes

    async def snapshot(
        self, ids: EpisodeIds, replacements: Sequence[tuple[str, str]] = ()
    ) -> tuple[AxSnapshot, bool]:
        """The tree once it has not changed for ``settle_s``; ``(tree, settled)``.

        Polling compares trees by Chromium's node ids, so elements that come and go while the
        page settles take no episode ids; only the final tree is numbered with ``ids``."""
        s = self.settings
        start = time.monotonic()
        nodes = await self._nodes()
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
            await asyncio.sleep(s.poll_s)
            nodes = await self._nodes()
            new_key = _signature(nodes, self._exclude)
            if new_key != key:
                key, stable_since = new_key, time.monotonic()
        tree = serialise_ax_tree(nodes, ids, exclude=self._exclude, replacements=replacements)
        return tree, settled

    # ------------------------------------------------------------------ actions

    async def _centre(self, backend_id: int) -> tuple[float, float]:
        params = {"backendNodeId": backend_id}
        scroll = self._cdp.send("DOM.scrollIntoViewIfNeeded", params)
        await self._call(scroll, ActionUnavailable)
        quads = (
            await self._call(self._cdp.send("DOM.getContentQuads", params), ActionUnavailable)
        )["quads"]
        for quad in quads:
            xs, ys = quad[0::2], quad[1::2]
            if max(xs) - min(xs) >= 1 and max(ys) - min(ys) >= 1:
                x, y = sum(xs) / 4, sum(ys) / 4
                if 0 <= x < self.settings.width and 0 <= y < self.settings.height:
                    return x, y
        raise ActionUnavailable(f"element {backend_id} has no box inside the viewport")

    async def click(self, backend_id: int) -> None:
        """A real mouse click at the centre of the element's first box."""
        x, y = await self._centre(backend_id)
        await self._call(self._page.mouse.click(x, y), BrowserCrashed)

    async def type_text(self, backend_id: int, text: str, enter: bool) -> None:
        """Click the element, type ``text`` key by key, then Enter if asked."""
        await self.click(backend_id)
        await self._call(self._page.keyboard.type(text), BrowserCrashed)
        if enter:
            await self._call(self._page.keyboard.press("Enter"), BrowserCrashed)

    async def crash_page(self) -> None:
        """Crash the page's renderer (``chrome://crash``), as a real crash would, and wait for
        Chromium to report it: how the collector's crash handling is exercised."""
        from playwright.async_api import Error

        try:
            await asyncio.wait_for(self._page.goto("chrome://crash"), self.settings.call_timeout_s)
        except (Error, TimeoutError) as exc:  # the navigation dies with the renderer
            logger.debug("chrome://crash: %s", exc)
        deadline = time.monotonic() + self.settings.call_timeout_s
        while not self.crashed and time.monotonic() < deadline:
            with contextlib.suppress(Error, TimeoutError):
                await asyncio.wait_for(self._page.evaluate("0"), self.settings.call_timeout_s)
            await asyncio.sleep(self.settings.poll_s)


def _signature(nodes: Sequence[dict[str, Any]], exclude: frozenset[int]) -> tuple[str, ...]:
    """What decides whether the tree changed: every shown line with Chromium's own ids."""
    tree = serialise_ax_tree(nodes, EpisodeIds(), exclude=exclude)
    return tuple(
        f"{line.backend_id}/{line.depth}/{line.text.split(' ', 1)[1]}" for line in tree.lines
    )
