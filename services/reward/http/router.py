"""HTTP routes of the reward gateway (thin: parse, call ``RewardServing``, answer).

``create_app(serving, settings, metrics)`` builds the FastAPI app; the routes live at module level
and find their collaborators on ``app.state``. Errors: ``InvalidInput`` -> 422 ``{"detail": msg}``
naming the field (schema errors keep FastAPI's 422 list form); body over ``max_payload_bytes`` ->
413; missing or wrong bearer token (when a token is set) -> 401, answered by
``rlvr_world.scaffold.auth.TokenGate`` before the body is read; a sample the OpenRLHF or slime
route could not score for a reason that is not the policy's (``serving.NotScored``: status
timeout or error) -> 503, so those clients retry and then fail loudly. The probes (``/healthz``,
``/readyz``), ``/metrics`` and the docs need no token.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlvr_world.bounded_json import has_surrogate_escape, loads_bounded, might_be_too_deep
from rlvr_world.rewards.types import InvalidInput
from rlvr_world.scaffold.auth import TokenGate
from services.reward.http import protocol as api
from services.reward.http.serving import NotScored, RewardServing
from services.reward.metrics import RewardMetrics
from services.reward.settings import RewardSettings

NPZ_TYPE = "application/x-npz"
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": api.ErrorOut, "description": "missing or wrong bearer token"},
    413: {"model": api.ErrorOut, "description": "body larger than max_payload_bytes"},
}
_NOT_SCORED: dict[int | str, dict[str, Any]] = {
    422: {"model": api.ErrorOut, "description": "bad request, or a label the scorer refused"},
    503: {"model": api.ErrorOut, "description": "a sample not scored (status timeout or error)"},
}


def get_serving(request: Request) -> RewardServing:
    """The app's ``RewardServing`` (a FastAPI dependency)."""
    serving: RewardServing = request.app.state.serving
    return serving


#: Paths that need no token: probes, metrics, the API docs.
OPEN_PATHS = frozenset(
    {"/healthz", "/readyz", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
)
Serving = Annotated[RewardServing, Depends(get_serving)]
router = APIRouter(responses=_ERRORS)
probes = APIRouter()


@router.post("/v1/score", response_model=api.ScoreResponseOut, response_model_exclude_none=True)
async def score(body: api.ScoreRequestIn, serving: Serving) -> api.ScoreResponseOut:
    """Score one request (verl style or typed)."""
    return await serving.score(body)


@router.post("/v1/score/batch", response_model=api.ScoreBatchOut, response_model_exclude_none=True)
async def score_batch(body: api.ScoreBatchIn, serving: Serving) -> api.ScoreBatchOut:
    """Score many requests in parallel; responses in request order."""
    return await serving.score_batch(body)


@router.post(
    "/v1/score/npz",
    response_model=api.ScoreResponseOut,
    response_model_exclude_none=True,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {NPZ_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def score_npz(request: Request, serving: Serving) -> api.ScoreResponseOut:
    """Score video frames sent as one .npz archive (frames, target_frames[, previous_frame,
    request]); see ``services.reward.http.serving``."""
    return await serving.score_npz(await request.body())


@router.post("/get_reward", response_model=api.GetRewardOut, responses=_NOT_SCORED)
async def get_reward(body: api.GetRewardIn, serving: Serving) -> api.GetRewardOut:
    """OpenRLHF remote reward model (``--remote_rm_url http://HOST:PORT/get_reward``)."""
    return await serving.get_reward(body)


@router.post("/slime/reward", response_model=api.SlimeRewardOut, responses=_NOT_SCORED)
async def slime_reward(body: api.SlimeRewardIn, serving: Serving) -> api.SlimeRewardOut:
    """slime remote reward (``--rm-type remote_rm --rm-url http://HOST:PORT/slime/reward
    --reward-key reward``): one sample per call."""
    return await serving.slime_reward(body)


@probes.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@probes.get("/readyz", responses={503: {"model": api.ErrorOut}})
async def readyz(request: Request) -> Response:
    """Readiness: every scoring process is up (one dead and being replaced: 503 "degraded") and
    the server is not shutting down."""
    engine = request.app.state.serving.engine
    if request.app.state.draining:
        return JSONResponse({"detail": "not ready: draining"}, status_code=503)
    if not engine.healthy:
        return JSONResponse({"detail": f"degraded: {engine.health_text()}"}, status_code=503)
    return JSONResponse({"status": "ready", "detail": engine.health_text()})


@probes.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus metrics of this process."""
    body = request.app.state.metrics.render()
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


class BodyLimit:
    """ASGI middleware: bodies over ``limit`` bytes get 413 before any parsing; a JSON body
    nested deeper than ``bounded_json.MAX_DEPTH`` or holding a lone surrogate gets 422 before
    FastAPI parses it (a cheap count of brackets and a search for surrogate escapes decide
    whether the body needs that check at all)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large(int(declared), send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._too_large(size, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        problem = _json_problem(scope, body)
        if problem is not None:
            await _answer(422, problem, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, size: int, send: Send) -> None:
        await _answer(413, f"body: {size} bytes exceed max_payload_bytes={self.limit}", send)


def _json_problem(scope: Scope, body: bytes) -> str | None:
    """Why a JSON body must be refused before it is parsed, or None."""
    ctype = dict(scope.get("headers", [])).get(b"content-type", b"application/json")
    if b"json" not in ctype.lower():
        return None
    if not (might_be_too_deep(body) or has_surrogate_escape(body)):
        return None
    try:
        loads_bounded(body, "body", max_bytes=len(body))
    except InvalidInput as exc:
        if "not valid JSON" in str(exc):
            return None  # FastAPI reports malformed JSON in its own words
        return str(exc)
    return None


async def _answer(status: int, detail: str, send: Send) -> None:
    response = JSONResponse({"detail": detail}, status_code=status)
    await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


async def _invalid_input(_request: Request, exc: Exception) -> Response:
    return JSONResponse({"detail": str(exc)}, status_code=422)


async def _not_scored(_request: Request, exc: Exception) -> Response:
    return JSONResponse({"detail": str(exc)}, status_code=503)


def _timing(metrics: RewardMetrics) -> Callable[[Request, Any], Awaitable[Response]]:
    async def middleware(request: Request, call_next: Any) -> Response:
        gauge = metrics.in_flight.labels("http")
        gauge.inc()
        t0 = time.perf_counter()
        try:
            response: Response = await call_next(request)
        finally:
            gauge.dec()
            route = request.scope.get("route")
            path = getattr(route, "path", "unmatched")
            metrics.latency.labels(path, "http").observe(time.perf_counter() - t0)
        return response

    return middleware


def create_app(serving: RewardServing, settings: RewardSettings, metrics: RewardMetrics) -> FastAPI:
    """The gateway app over a started engine (routes above, limits, error mapping)."""
    app = FastAPI(
        title="RLVR-World reward service",
        version="1",
        description="Verifiable rewards for world models: text game, web, video. "
        "Same scorers as the gRPC RewardService.",
    )
    app.state.serving = serving
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.draining = False
    app.include_router(router)
    app.include_router(probes)
    app.add_exception_handler(InvalidInput, _invalid_input)
    app.add_exception_handler(NotScored, _not_scored)
    app.middleware("http")(_timing(metrics))
    app.add_middleware(BodyLimit, limit=settings.max_payload_bytes)
    token = settings.token()
    if token is not None:  # outermost: refused before BodyLimit reads the body
        app.add_middleware(
            TokenGate,
            token=token,
            open_paths=OPEN_PATHS,
            on_reject=metrics.rejected.labels("unauthenticated", "http").inc,
        )
    return app
