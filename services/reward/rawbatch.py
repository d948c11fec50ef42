"""``ScoreBatch`` as wire bytes: the service process splits, the scoring processes parse and encode.

The throughput path of the service. The event loop is the one thread that serves every call, so
it does not parse the ``ScoreRequest``s, build a job for each or build the ``ScoreResponse``s:
those per-request costs go to the scoring processes (``bench/reward_main_cpu.py`` measures the
loop's CPU per request; docs/benchmarks.md has the figures). The event loop only finds
where each ``requests`` entry starts and ends in the call's bytes (``split_requests``: a tag and a
length per request, no parsing of its fields), hands each chunk of entries to a scoring process
as one ``bytes``, and joins the encoded ``responses`` entries the processes send back.

A ``ScoreBatchRequest`` whose only field is ``repeated ScoreRequest requests = 1`` is, on the wire,
one ``(tag 0x0A, length, ScoreRequest bytes)`` entry per request; a ``ScoreBatchResponse`` likewise
for ``responses``. So a chunk of entries is itself a valid ``ScoreBatchRequest``, and the
concatenation of encoded response entries, in request order, is the ``ScoreBatchResponse``.

Video requests stay in the service process (their frames are scored there, micro-batched, as
soon as the call comes in): ``peek_task`` reads an entry's task from its first bytes. The scoring
process (``score_raw_chunk``) checks each request as ``convert.job_from_proto`` and
``RawTextJob.checked`` do (same messages) and scores text requests; it hands back any video
request it finds (one whose task was not among its first two fields), and stops at the first
invalid request of its chunk: the call is refused at the first invalid request anyway.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from typing import NamedTuple

from rlvr_world.rewards.dispatch import score_text
from rlvr_world.rewards.types import InvalidInput, Status, failed
from rlvr_world.v1 import common_pb2, reward_pb2
from services.reward.convert import RawTextJob, job_from_proto, result_to_proto

log = logging.getLogger(__name__)
#: Tag of field 1, wire type 2 (length-delimited): ``requests`` / ``responses``.
ENTRY_TAG = 0x0A
#: Tag of field 2, wire type 0 (varint): a ``ScoreRequest``'s ``task``.
TASK_TAG = 0x10
#: A varint byte with this bit set is followed by another; the low 7 bits carry the value.
_MORE = 0x80
_PAYLOAD = 0x7F
#: Largest shift of a varint's last byte: 10 bytes of 7 bits hold 64.
_MAX_SHIFT = 63
_WIRE_VARINT, _WIRE_FIXED64, _WIRE_LEN, _WIRE_FIXED32 = 0, 1, 2, 5


class Entry(NamedTuple):
    """One ``requests`` entry: ``data[tag:end]`` is the entry, ``data[body:end]`` the message."""

    tag: int
    body: int
    end: int


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the base-128 varint at ``pos``."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise InvalidInput("requests: malformed ScoreBatchRequest (truncated varint)")
        byte = data[pos]
        pos += 1
        value |= (byte & _PAYLOAD) << shift
        if byte < _MORE:
            return value, pos
        shift += 7
        if shift > _MAX_SHIFT:
            raise InvalidInput("requests: malformed ScoreBatchRequest (varint over 10 bytes)")


def split_requests(data: bytes) -> list[Entry]:
    """The ``requests`` entries of a serialized ``ScoreBatchRequest``, in order.

    Fields other than ``requests`` (none today; a newer client's) are skipped as proto3 parsers do.
    ``InvalidInput`` for bytes that are not a well-formed message at this level (the scoring
    process parses each entry's fields)."""
    entries: list[Entry] = []
    pos, n = 0, len(data)
    while pos < n:
        start = pos
        if data[pos] == ENTRY_TAG:  # the common case: one byte tag
            key, pos = ENTRY_TAG, pos + 1
        else:
            key, pos = _varint(data, pos)
        wire = key & 7
        if wire == _WIRE_LEN:
            size, pos = _varint(data, pos)
            if pos + size > n:
                raise InvalidInput(
                    f"requests: malformed ScoreBatchRequest (field {key >> 3} runs past the end)"
                )
            if key == ENTRY_TAG:
                entries.append(Entry(start, pos, pos + size))
            pos += size
        elif wire == _WIRE_VARINT:
            _, pos = _varint(data, pos)
        elif wire in (_WIRE_FIXED64, _WIRE_FIXED32):
            pos += 8 if wire == _WIRE_FIXED64 else 4
            if pos > n:
                raise InvalidInput("requests: malformed ScoreBatchRequest (truncated field)")
        else:
            raise InvalidInput(f"requests: malformed ScoreBatchRequest (wire type {wire})")
        if key >> 3 == 0:
            raise InvalidInput("requests: malformed ScoreBatchRequest (field number 0)")
    return entries


def chunk_bytes(data: bytes, entries: list[Entry]) -> bytes:
    """The entries as one ``ScoreBatchRequest`` (a slice when they are contiguous, as always
    unless a client interleaves other fields)."""
    if all(a.end == b.tag for a, b in pairwise(entries)):
        return data[entries[0].tag : entries[-1].end]
    return b"".join(data[e.tag : e.end] for e in entries)


def encode_entry(resp: reward_pb2.ScoreResponse) -> bytes:
    """``resp`` as one ``responses`` entry of a ``ScoreBatchResponse``."""
    body = resp.SerializeToString()
    return bytes((ENTRY_TAG,)) + encode_varint(len(body)) + body


def encode_varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative ``value``."""
    out = bytearray()
    while value >= _MORE:
        out.append((value & _PAYLOAD) | _MORE)
        value >>= 7
    out.append(value)
    return bytes(out)


def parse_entry(data: bytes, entry: Entry) -> reward_pb2.ScoreRequest:
    """One entry parsed in the service process (video requests, and answering a chunk that was
    not scored: deadline, dead process); ``InvalidInput`` when it does not parse."""
    try:
        return reward_pb2.ScoreRequest.FromString(data[entry.body : entry.end])
    except Exception as exc:  # DecodeError
        raise InvalidInput(f"malformed ScoreRequest ({exc})") from None


def peek_task(data: bytes, entry: Entry) -> int | None:
    """The ``task`` of one entry without parsing it, when it is one of its first two fields (as
    every protobuf serializer writes them: ``request_id`` = 1, ``task`` = 2, in field order);
    None otherwise (unset, or written later: the scoring process parses it then)."""
    pos, end = entry.body, entry.end
    try:
        for _ in range(2):
            if pos >= end:
                return None
            key = data[pos]
            if key == TASK_TAG:
                value, after = _varint(data, pos + 1)
                return value if after <= end else None
            if key != ENTRY_TAG:  # field 1 (request_id) is the only one that may come first
                return None
            size, pos = _varint(data, pos + 1)
            pos += size
    except InvalidInput:  # malformed: the scoring process reports it
        return None
    return None


class RawChunk(NamedTuple):
    """Work for a scoring process: ``data`` holds some requests of a batch as a serialized
    ``ScoreBatchRequest``; ``join``: answer their entries as one ``bytes`` (they are adjacent in
    the batch) rather than one per request."""

    data: bytes
    join: bool = True


@dataclass(frozen=True)
class RawAnswer:
    """A scoring process's answer to a ``RawChunk``.

    ``entries``: the encoded ``responses`` entries joined, or one per request (``None`` for a video
    request, left to the service process). ``counts``: requests scored per (task, status).
    ``rejected``: (index in the chunk, message) of the chunk's first invalid request; ``entries``
    then lists the requests before it (a video one among them is still to be checked: it may come
    first) and the rest of the chunk is not scored."""

    entries: bytes | list[bytes | None]
    counts: dict[tuple[str, str], int]
    rejected: tuple[int, str] | None = None


def score_raw_chunk(chunk: RawChunk) -> RawAnswer:
    """Pool side: parse, check and score a chunk of requests, encode the responses."""
    try:
        batch = reward_pb2.ScoreBatchRequest.FromString(chunk.data)
    except Exception as exc:  # DecodeError: a malformed entry somewhere in the chunk
        return RawAnswer([], {}, (0, f"malformed ScoreRequest ({exc})"))
    parts: list[bytes | None] = []
    counts: Counter[tuple[str, str]] = Counter()
    for i, req in enumerate(batch.requests):
        if req.task == common_pb2.TASK_VIDEO:
            parts.append(None)
            continue
        try:
            job = job_from_proto(req)
            assert isinstance(job, RawTextJob)  # not video, so text (or InvalidInput)
            text = job.checked()
        except InvalidInput as exc:  # the requests before it, with any video ones, and it
            return RawAnswer(parts, {}, (i, str(exc)))
        try:
            result = score_text(text.request)
        except Exception as exc:  # a scorer bug must not fail its neighbours
            log.exception("scorer raised on a %s request", text.task)
            result = failed(Status.ERROR, f"scorer raised {type(exc).__name__}: {exc}")
        counts[text.task, result.status.value] += 1
        parts.append(encode_entry(result_to_proto(req.request_id, result)))
    joined: bytes | list[bytes | None] = parts
    if chunk.join and None not in parts:
        joined = b"".join(p for p in parts if p is not None)  # none is: checked above
    return RawAnswer(joined, dict(counts))
