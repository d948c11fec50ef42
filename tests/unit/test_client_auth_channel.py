"""``ClientAuth.channel`` and ``aio_channel``: every call kind carries the token (one in-process
gRPC server with raw-bytes methods of the four kinds, each answering the ``authorization`` header
it received)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from concurrent import futures

import grpc
import pytest

from rlvr_world.scaffold.client_auth import ClientAuth


def _header(context: grpc.ServicerContext) -> bytes:
    return dict(context.invocation_metadata()).get("authorization", "").encode()


def _unary_unary(request: bytes, context: grpc.ServicerContext) -> bytes:
    return _header(context)


def _unary_stream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
    yield _header(context)


def _stream_unary(requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
    for _ in requests:
        pass
    return _header(context)


def _stream_stream(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
    for _ in requests:
        pass
    yield _header(context)


@pytest.fixture
def target() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handlers = {
        "UU": grpc.unary_unary_rpc_method_handler(_unary_unary),
        "US": grpc.unary_stream_rpc_method_handler(_unary_stream),
        "SU": grpc.stream_unary_rpc_method_handler(_stream_unary),
        "SS": grpc.stream_stream_rpc_method_handler(_stream_stream),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.T", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


@pytest.mark.parametrize("token", ["s3cret", None])
def test_every_call_kind_carries_the_token(target: str, token: str | None) -> None:
    expected = f"Bearer {token}".encode() if token else b""
    with ClientAuth(token=token).channel(target) as channel:
        assert channel.unary_unary("/t.T/UU")(b"x", timeout=10) == expected
        assert list(channel.unary_stream("/t.T/US")(b"x", timeout=10)) == [expected]
        assert channel.stream_unary("/t.T/SU")(iter([b"x", b"y"]), timeout=10) == expected
        assert list(channel.stream_stream("/t.T/SS")(iter([b"x"]), timeout=10)) == [expected]
        # the call's own metadata stays next to the token
        response, call = channel.unary_unary("/t.T/UU").with_call(
            b"x", timeout=10, metadata=(("x-other", "1"),)
        )
        assert response == expected and call.code() == grpc.StatusCode.OK


async def _requests(*items: bytes) -> AsyncIterator[bytes]:
    for item in items:
        yield item


async def _aio_answers(target: str, token: str | None) -> list[object]:
    async with ClientAuth(token=token).aio_channel(target) as channel:
        return [
            await channel.unary_unary("/t.T/UU")(b"x", timeout=10),
            [r async for r in channel.unary_stream("/t.T/US")(b"x", timeout=10)],
            await channel.stream_unary("/t.T/SU")(_requests(b"x", b"y"), timeout=10),
            [r async for r in channel.stream_stream("/t.T/SS")(_requests(b"x"), timeout=10)],
            await channel.unary_unary("/t.T/UU")(b"x", timeout=10, metadata=(("x-other", "1"),)),
        ]


@pytest.mark.parametrize("token", ["s3cret", None])
def test_every_aio_call_kind_carries_the_token(target: str, token: str | None) -> None:
    expected = f"Bearer {token}".encode() if token else b""
    answers = asyncio.run(_aio_answers(target, token))
    assert answers == [expected, [expected], expected, [expected], expected]
