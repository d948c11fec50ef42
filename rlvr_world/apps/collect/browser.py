"""A headless Chromium driven through Playwright, showing MiniWoB++ task pages.

``Browser`` starts the system Chromium (Debian's ``chromium``; Playwright's own browser
downloads are never used) once, with the flags of ``CHROMIUM_ARGS`` and a fresh temporary
profile (``--user-data-dir``, made and removed by Playwright). Each task page gets a new browser
context (no cookies or storage carried over) and one page, and the collector can: open a task
page for a seed, read the accessibility tree (CDP ``Accessibility.getFullAXTree``, serialised by
``rlvr_world.web.axtree``) once the page stops changing, click an element or type into it with
real mouse and keyboard events, and read the episode's end and reward from MiniWoB's globals.

**Page time.** Pages run on Playwright's fake clock (``page.clock``), paused: timers, intervals
and animation frames fire only when the collector lets ``step_ms`` of page time pass, after the
episode starts and after each action, and ``Date`` reads ``CLOCK_START + CLOCK_MARGIN`` when a
page loads. A page's own timing (a menu that opens 300 ms after the pointer enters, a cursor that
blinks every 800 ms, "Last login: <today>") then gives the same tree on every run and machine;
with the real clock those trees depended on when they happened to be read.

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
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from playwright.async_api import Browser as PwBrowser
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

#: The fake clock of every page is installed at ``CLOCK_START`` and paused ``CLOCK_MARGIN`` later
#: (an installed clock runs until paused, and cannot be moved back); pages load at the pause.
CLOCK_START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
CLOCK_MARGIN = dt.timedelta(minutes=10)
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
    settle_s: float = 0.1  # the tree must stay the same this long after an action
    max_settle_s: float = 5.0  # ... or this long has passed (then the step is "unsettled")
    poll_s: float = 0.05
    step_ms: int = 1000  # page time let pass after the episode starts and after each action
    call_timeout_s: float = 30.0  # any one browser call; past it the browser counts as crashed
    width: int = 800
    height: int = 600


@dataclass
class _Tab:
    """The context, page and CDP session of the current task page."""

    context: BrowserContext
    page: Page
    cdp: CDPSession


class Browser:
    """One Chromium process; one task page at a time (module docstring).

    Made by ``await Browser.launch(settings)``; ``await close()`` when done."""

    def __init__(self, settings: BrowserSettings, playwright: Playwright, browser: PwBrowser):
        self.settings = settings
        self.crashed = False
        self._pw = playwright
        self._browser = browser
        self._tab: _Tab | None = None
        self._closing = False
        self._exclude: frozenset[int] = frozenset()
        browser.on("disconnected", self._on_crash)

    @classmethod
    async def launch(cls, settings: BrowserSettings) -> Browser:
        """Start Chromium (``FileNotFoundError`` when the binary is missing)."""
        from playwright.async_api import async_playwright

        if not settings.executable.is_file():
            raise FileNotFoundError(
                f"Chromium not found at {settings.executable}: install Debian's chromium "
                "(scripts/setup_chromium.sh) or pass --chromium PATH"
            )
        pw = await async_playwright().start()
        try:
            browser = await asyncio.wait_for(
                pw.chromium.launch(
                    executable_path=str(settings.executable),
                    headless=True,
                    args=list(CHROMIUM_ARGS),
                ),
                settings.call_timeout_s,
            )
        except BaseException:
            await pw.stop()
            raise
        return cls(settings, pw, browser)

    def _on_crash(self, _target: Any) -> None:
        if not self.crashed and not self._closing:
            logger.warning("the page's renderer or the browser went away")
        self.crashed = True

    async def close(self) -> None:
        """Stop the browser; safe after a crash and twice."""
        self._closing = True
        try:
            await asyncio.wait_for(self._browser.close(), self.settings.call_timeout_s)
        except Exception as exc:  # a crashed or stuck browser; stopping the driver ends it
            logger.debug("closing the browser: %s", exc)
        await self._pw.stop()

    @property
    def _page(self) -> Page:
        if self._tab is None:
            raise RuntimeError("no task page: call start_task first")
        return self._tab.page

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
            gone = (self._tab is not None and self._tab.page.is_closed()) or any(
                word in message.lower() for word in ("crash", "closed", "disconnected")
            )
            if self.crashed or gone:
                self.crashed = True
                raise BrowserCrashed(message) from exc
            raise failure(message) from exc

    async def _new_tab(self) -> _Tab:
        """A fresh context and page on a paused fake clock; the previous one is closed."""
        if self._tab is not None:
            old, self._tab = self._tab, None
            await self._call(old.context.close(), BrowserCrashed)
        s = self.settings
        context = await self._call(
            self._browser.new_context(viewport={"width": s.width, "height": s.height}),
            BrowserCrashed,
        )
        page = await self._call(context.new_page(), BrowserCrashed)
        page.on("crash", self._on_crash)
        await self._call(page.clock.install(time=CLOCK_START), BrowserCrashed)
        # installed clocks run until paused; pause where no real delay can have got to
        await self._call(page.clock.pause_at(CLOCK_START + CLOCK_MARGIN), BrowserCrashed)
        cdp = await self._call(context.new_cdp_session(page), BrowserCrashed)
        self._tab = _Tab(context, page, cdp)
        return self._tab

    async def let_time_pass(self, ms: int | None = None) -> None:
        """Run the page's clock for ``ms`` (default ``step_ms``): due timers and frames fire."""
        ms = self.settings.step_ms if ms is None else ms
        await self._call(self._page.clock.run_for(ms), BrowserCrashed)

    async def evaluate(self, expression: str, arg: Any = None) -> Any:
        """Run JavaScript in the page (``BrowserCrashed`` if it is gone)."""
        return await self._call(self._page.evaluate(expression, arg), BrowserCrashed)

    # ------------------------------------------------------------------ task pages

    async def start_task(self, url: str, seed: str) -> str:
        """Load a task page, seed its random numbers, start an episode; returns the objective."""
        timeout_ms = self.settings.page_timeout_s * 1000
        await self._new_tab()
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
        waited_ms = 0
        poll_ms = max(1, round(self.settings.poll_s * 1000))
        while not await self.evaluate("WOB_TASK_READY === true"):
            if waited_ms > self.settings.page_timeout_s * 1000:
                raise PageLoadFailed(f"{url}: the task never became ready")
            await self.let_time_pass(poll_ms)
            waited_ms += poll_ms
        await self.let_time_pass()
        self._exclude = frozenset(await self._hud_backend_ids())
        return str(await self.evaluate("core.getUtterance()"))

    async def _send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        if self._tab is None:
            raise RuntimeError("no task page: call start_task first")
        result: dict[str, Any] = await self._call(
            self._tab.cdp.send(method, params), BrowserCrashed
        )
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
        if self._tab is None:
            raise RuntimeError("no task page: call start_task first")
        cdp, params = self._tab.cdp, {"backendNodeId": backend_id}
        await self._call(cdp.send("DOM.scrollIntoViewIfNeeded", params), ActionUnavailable)
        found = await self._call(cdp.send("DOM.getContentQuads", params), ActionUnavailable)
        quads = found["quads"]
        for quad in quads:
            xs, ys = quad[0::2], quad[1::2]
            if max(xs) - min(xs) >= 1 and max(ys) - min(ys) >= 1:
                x, y = sum(xs) / 4, sum(ys) / 4
                if 0 <= x < self.settings.width and 0 <= y < self.settings.height:
                    return x, y
        raise ActionUnavailable(f"element {backend_id} has no box inside the viewport")

    async def click(self, backend_id: int, *, then_wait: bool = True) -> None:
        """A real mouse click at the centre of the element's first box, then ``step_ms`` of
        page time (unless ``then_wait`` is False)."""
        x, y = await self._centre(backend_id)
        await self._call(self._page.mouse.click(x, y), BrowserCrashed)
        if then_wait:
            await self.let_time_pass()

    async def type_text(self, backend_id: int, text: str, enter: bool) -> None:
        """Click the element, type ``text`` key by key, then Enter if asked; then ``step_ms``
        of page time."""
        await self.click(backend_id, then_wait=False)
        await self._call(self._page.keyboard.type(text), BrowserCrashed)
        if enter:
            await self._call(self._page.keyboard.press("Enter"), BrowserCrashed)
        await self.let_time_pass()

    async def crash_page(self) -> None:
        """Crash the page's renderer (``chrome://crash``), as a real crash would, and wait for
        Chromium to report it: how the collector's crash handling is exercised."""
        from playwright.async_api import Error

        if self._tab is None:
            await self._new_tab()
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
