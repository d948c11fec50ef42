"""``ScoreBatch`` on wire bytes (``services.reward.rawbatch``): splitting a serialized batch into
its request entries, malformed bytes, and the scoring process's encoded answers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_world.client import verl_request
from rlvr_world.rewards.dispatch import score_mapping
from rlvr_world.rewards.types import InvalidInput
from rlvr_world.v1 import common_pb2, reward_pb2
from rlvr_world.wire import codec
from services.reward import convert, rawbatch

DIFF = "New items:\n[214] link 'View order'\n\nDeleted items:\n[88] button 'Place Order'"
WEB = {"data_source": "web_agent", "solution_str": DIFF, "ground_truth": DIFF}


def _batch(n: int, text_len: int = 5) -> reward_pb2.ScoreBatchRequest:
    return reward_pb2.ScoreBatchRequest(
        requests=[
            verl_request({**WEB, "solution_str": "x" * (text_len + i)}, f"r{i}") for i in range(n)
        ]
    )


@pytest.mark.parametrize(("n", "text_len"), [(1, 0), (3, 5), (40, 200), (2, 20_000)])
def test_split_finds_every_request_and_chunks_reparse(n: int, text_len: int) -> None:
    """Entry lengths of 1, 2 and 3 varint bytes; any run of entries is itself a batch."""
    batch = _batch(n, text_len)
    data = batch.SerializeToString()
    entries = rawbatch.split_requests(data)
    assert [data[e.body : e.end] for e in entries] == [
        r.SerializeToString() for r in batch.requests
    ]
    for start, stop in [(0, n), (n // 2, n), (0, max(1, n // 2))]:
        part = reward_pb2.ScoreBatchRequest.FromString(
            rawbatch.chunk_bytes(data, entries[start:stop])
        )
        assert list(part.requests) == list(batch.requests[start:stop])


def test_other_fields_are_skipped_and_interleaved_entries_still_join() -> None:
    """A newer client's fields (varint, fixed64, length-delimited, fixed32) between entries."""
    reqs = list(_batch(3).requests)
    other = [
        bytes([2 << 3 | 0]) + b"\x96\x01",  # field 2, varint 150
        bytes([3 << 3 | 1]) + b"\0" * 8,  # field 3, fixed64
        bytes([4 << 3 | 2, 3]) + b"abc",  # field 4, 3 bytes
        bytes([5 << 3 | 5]) + b"\0" * 4,  # field 5, fixed32
    ]
    encoded = [reward_pb2.ScoreBatchRequest(requests=[r]).SerializeToString() for r in reqs]
    data = other[0] + encoded[0] + other[1] + encoded[1] + other[2] + other[3] + encoded[2]
    entries = rawbatch.split_requests(data)
    assert len(entries) == 3
    assert list(reward_pb2.ScoreBatchRequest.FromString(data).requests) == reqs  # protobuf agrees
    joined = rawbatch.chunk_bytes(data, entries)
    assert list(reward_pb2.ScoreBatchRequest.FromString(joined).requests) == reqs


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x0a\x05abc", "field 1 runs past the end"),
        (b"\x0a\x80", "truncated varint"),
        (b"\x0a" + b"\xff" * 11, "varint over 10 bytes"),
        (b"\x0b", "wire type 3"),
        (b"\x02\x00", "field number 0"),
        (b"\x15\x00\x00", "truncated field"),
    ],
)
def test_malformed_batch_bytes_name_the_field(data: bytes, message: str) -> None:
    with pytest.raises(InvalidInput, match=f"^requests: malformed ScoreBatchRequest .*{message}"):
        rawbatch.split_requests(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_split_or_raise_invalid_input(data: bytes) -> None:
    """Never another exception; whatever splits, protobuf parses to as many requests or
    rejects (then the scoring process answers the chunk as malformed)."""
    try:
        entries = rawbatch.split_requests(data)
    except InvalidInput:
        return
    for e in entries:
        assert 0 <= e.tag < e.body <= e.end <= len(data)


def test_scoring_process_encodes_what_the_core_scores() -> None:
    batch = reward_pb2.ScoreBatchRequest(
        requests=[verl_request(WEB, "same"), verl_request({**WEB, "solution_str": "x"}, "other")]
    )
    data = batch.SerializeToString()
    answer = rawbatch.score_raw_chunk(rawbatch.RawChunk(data))
    assert answer.rejected is None
    assert isinstance(answer.entries, bytes)
    out = reward_pb2.ScoreBatchResponse.FromString(answer.entries)
    assert [r.request_id for r in out.responses] == [r.request_id for r in batch.requests]
    statuses = []
    for req, resp in zip(batch.requests, out.responses, strict=True):
        core = score_mapping({**WEB, "solution_str": req.text})
        assert resp == convert.result_to_proto(req.request_id, core)
        statuses.append(core.status.value)
    assert out.responses[0].reward == 1.0
    assert answer.counts == {("web", s): statuses.count(s) for s in statuses}


def test_scoring_process_leaves_video_and_stops_at_the_first_invalid() -> None:
    frames = codec.encode_tensor(np.zeros((1, 4, 4, 3), np.uint8))
    video = reward_pb2.ScoreRequest(
        request_id="v", task=common_pb2.TASK_VIDEO, frames=frames, target_frames=frames
    )
    good = verl_request(WEB, "g")
    bad = verl_request({**WEB, "variant": "loose"}, "b")
    data = reward_pb2.ScoreBatchRequest(requests=[good, video, bad, good]).SerializeToString()
    answer = rawbatch.score_raw_chunk(rawbatch.RawChunk(data))
    assert answer.rejected is not None
    assert answer.rejected[0] == 2  # the chunk's third request
    assert answer.rejected[1].startswith("variant")
    assert isinstance(answer.entries, list)
    assert answer.entries[1] is None  # the video request before it: the service checks it
    assert len(answer.entries) == 2

    data = reward_pb2.ScoreBatchRequest(requests=[good, video, good]).SerializeToString()
    answer = rawbatch.score_raw_chunk(rawbatch.RawChunk(data))
    assert answer.rejected is None and isinstance(answer.entries, list)
    assert [e is None for e in answer.entries] == [False, True, False]
    parts = [e for e in answer.entries if e is not None]
    out = reward_pb2.ScoreBatchResponse.FromString(b"".join(parts))
    assert [r.request_id for r in out.responses] == ["g", "g"]


def test_scoring_process_answers_an_unparseable_chunk_as_rejected() -> None:
    answer = rawbatch.score_raw_chunk(rawbatch.RawChunk(b"\x0a\x02\x12\x05"))
    assert answer.rejected is not None
    assert answer.rejected[0] == 0
    assert answer.rejected[1].startswith("malformed ScoreRequest")


def test_unjoined_chunk_answers_one_entry_per_request() -> None:
    data = _batch(3).SerializeToString()
    answer = rawbatch.score_raw_chunk(rawbatch.RawChunk(data, join=False))
    assert isinstance(answer.entries, list) and len(answer.entries) == 3
    ids = [
        reward_pb2.ScoreBatchResponse.FromString(e).responses[0].request_id
        for e in answer.entries
        if e
    ]
    assert ids == ["r0", "r1", "r2"]


def test_peek_task_reads_the_task_as_serializers_write_it() -> None:
    frames = codec.encode_tensor(np.zeros((1, 4, 4, 3), np.uint8))
    video = reward_pb2.ScoreRequest(task=common_pb2.TASK_VIDEO, frames=frames, target_frames=frames)
    cases = [
        (
            reward_pb2.ScoreRequest(request_id="x" * 300, task=common_pb2.TASK_VIDEO),
            common_pb2.TASK_VIDEO,
        ),
        (video, common_pb2.TASK_VIDEO),  # no request_id: the task comes first
        (verl_request(WEB, "w"), common_pb2.TASK_WEB),
        (reward_pb2.ScoreRequest(request_id="u", text="t"), None),  # task unset (0): not written
    ]
    data = reward_pb2.ScoreBatchRequest(requests=[req for req, _ in cases]).SerializeToString()
    entries = rawbatch.split_requests(data)
    assert [rawbatch.peek_task(data, e) for e in entries] == [task for _, task in cases]
    # a task written after other fields is not peeked (the scoring process parses it)
    late = bytes([3 << 3 | 2, 1]) + b"t" + bytes([2 << 3 | 0, common_pb2.TASK_VIDEO])
    data = bytes([rawbatch.ENTRY_TAG, len(late)]) + late
    assert rawbatch.peek_task(data, rawbatch.split_requests(data)[0]) is None
    assert reward_pb2.ScoreRequest.FromString(late).task == common_pb2.TASK_VIDEO


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_peek_task_never_raises_or_reads_past_its_entry(body: bytes) -> None:
    """The same answer whether a task field follows the entry or nothing does."""
    entry = rawbatch.Entry(0, 2, 2 + len(body))
    head = bytes([rawbatch.ENTRY_TAG, len(body)]) + body
    alone = rawbatch.peek_task(head, entry)
    assert alone is None or isinstance(alone, int)
    assert rawbatch.peek_task(head + b"\x10\x03", entry) == alone
