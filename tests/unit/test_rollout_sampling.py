"""Pure parts of the rollout service: sampling math, wire conversion, weight messages, checks."""

from __future__ import annotations

import argparse
import math
from typing import Any

import pytest
import torch

from rlvr_world.v1 import rollout_pb2
from services.rollout.checkpoint import check_state_fits
from services.rollout.convert import params_from_proto
from services.rollout.engine import InvalidRequest, SamplingParams
from services.rollout.sampling import next_tokens, scaled_logprobs, truncate

NEG = float("-inf")


def test_scaled_logprobs_divide_by_temperature_and_greedy_uses_raw_logits() -> None:
    logits = torch.tensor([[0.0, math.log(3.0)]])
    assert scaled_logprobs(logits, 1.0).exp()[0].tolist() == pytest.approx([0.25, 0.75])
    # T = 0.5 squares the odds: 1 : 9
    assert scaled_logprobs(logits, 0.5).exp()[0].tolist() == pytest.approx([0.1, 0.9])
    assert scaled_logprobs(logits, 0.0).exp()[0].tolist() == pytest.approx([0.25, 0.75])


def test_truncate_top_k_keeps_the_k_largest() -> None:
    out = truncate(torch.tensor([[1.0, 4.0, 2.0, 3.0]]), top_k=2, top_p=1.0)
    assert out.tolist() == [[NEG, 4.0, NEG, 3.0]]


def test_truncate_top_p_keeps_the_smallest_set_reaching_p() -> None:
    logits = torch.log(torch.tensor([[0.1, 0.5, 0.15, 0.25]]))
    kept = truncate(logits, top_k=-1, top_p=0.7).isfinite().tolist()
    assert kept == [[False, True, False, True]]  # 0.5 + 0.25 >= 0.7
    assert truncate(logits, top_k=-1, top_p=0.5).isfinite().tolist() == [
        [False, True, False, False]
    ]
    assert truncate(logits, top_k=-1, top_p=0.01).isfinite().sum().item() == 1  # never empty
    assert truncate(logits, top_k=0, top_p=1.0).isfinite().all()


def test_next_tokens_report_untruncated_scaled_logprob_of_the_drawn_token() -> None:
    logits = torch.log(torch.tensor([[0.1, 0.5, 0.15, 0.25]] * 64))
    params = SamplingParams(n=64, temperature=1.0, top_k=1)
    tokens, logps = next_tokens(logits, params, torch.Generator().manual_seed(0))
    assert tokens.tolist() == [1] * 64  # top-1 always draws the arg-max
    assert logps.tolist() == pytest.approx([math.log(0.5)] * 64)  # not log(1)
    greedy, glogps = next_tokens(logits[:2], SamplingParams(temperature=0.0), None)
    assert greedy.tolist() == [1, 1] and glogps.tolist() == pytest.approx([math.log(0.5)] * 2)


def test_allowed_tokens_mask_the_draw_but_not_the_reported_logprob() -> None:
    logits = torch.log(torch.tensor([[0.6, 0.1, 0.2, 0.1]] * 256))
    params = SamplingParams(n=256, temperature=1.0, allowed_tokens=(1, 3))
    tokens, logps = next_tokens(logits, params, torch.Generator().manual_seed(0))
    assert set(tokens.tolist()) == {1, 2}  # id 0 holds most of the mass but is outside [1, 3)
    full = torch.log_softmax(logits[0], dim=-1)
    assert logps.tolist() == pytest.approx([full[t].item() for t in tokens.tolist()])
    greedy, _ = next_tokens(
        logits[:1], SamplingParams(temperature=0.0, allowed_tokens=(1, 3)), None
    )
    assert greedy.tolist() == [2]


def test_params_from_proto_reads_and_checks_allowed_tokens() -> None:
    msg = rollout_pb2.SamplingParams(
        n=1, max_tokens=1, allowed_tokens=rollout_pb2.TokenRange(begin=4, end=9)
    )
    assert params_from_proto(msg, 4, 10).allowed_tokens == (4, 9)
    assert (
        params_from_proto(rollout_pb2.SamplingParams(n=1, max_tokens=1), 4, 10).allowed_tokens
        is None
    )
    for begin, end in ((5, 5), (-1, 3), (7, 2)):
        bad = rollout_pb2.SamplingParams(
            n=1, max_tokens=1, allowed_tokens=rollout_pb2.TokenRange(begin=begin, end=end)
        )
        with pytest.raises(InvalidRequest, match=r"sampling\.allowed_tokens"):
            params_from_proto(bad, 4, 10)


def test_params_from_proto_maps_zero_values_and_refuses_out_of_range() -> None:
    msg = rollout_pb2.SamplingParams(n=2, max_tokens=5, stop=["\n"])
    params = params_from_proto(msg, max_n=4, max_tokens=10)
    assert params == SamplingParams(
        n=2, temperature=0.0, top_p=1.0, top_k=-1, max_tokens=5, seed=None, stop=("\n",)
    )
    seeded = rollout_pb2.SamplingParams(n=1, max_tokens=1, seed=3, top_k=7, top_p=0.5)
    assert params_from_proto(seeded, 4, 10).seed == 3
    bad = {
        "n": (5, "sampling.n = 5"),
        "max_tokens": (11, "sampling.max_tokens = 11"),
        "top_k": (-2, "sampling.top_k = -2"),
        "top_p": (float("nan"), "sampling.top_p = nan"),
        "temperature": (float("inf"), "sampling.temperature = inf"),
    }
    for field, (value, message) in bad.items():
        fields: dict[str, Any] = {"n": 1, "max_tokens": 1, field: value}
        with pytest.raises(InvalidRequest, match=message.replace(".", r"\.")):
            params_from_proto(rollout_pb2.SamplingParams(**fields), 4, 10)


def test_check_state_fits_accepts_tied_weights_and_names_mismatches() -> None:
    shared = torch.zeros(3, 2)
    own = {"embed": shared, "head": shared, "norm": torch.zeros(2)}
    check_state_fits(own, {"embed": torch.ones(3, 2), "norm": torch.ones(2)})  # head is tied
    with pytest.raises(InvalidRequest, match="lacks weight 'norm'"):
        check_state_fits(own, {"embed": torch.ones(3, 2)})
    with pytest.raises(InvalidRequest, match=r"'norm' has shape \(3,\), the served model \(2,\)"):
        check_state_fits(own, {"embed": torch.ones(3, 2), "norm": torch.ones(3)})
    with pytest.raises(InvalidRequest, match="'extra' is not a weight"):
        check_state_fits(own, {"embed": torch.ones(3, 2), "norm": torch.ones(2), "extra": shared})


def test_serve_rollout_and_decoder_parsers_share_serve_and_map_options() -> None:
    from services.decoder.cli import COMMAND as DECODER
    from services.rollout.cli import COMMAND

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    COMMAND.add_parser(sub)
    DECODER.add_parser(sub)
    args = parser.parse_args(
        ["serve", "rollout", "--model", "m", "--grpc-port", "0", "--redis-url", "redis://x"]
    )
    assert args.handler == COMMAND.run
    settings = COMMAND.settings_from_args(args)
    assert (settings.model, settings.grpc_port, settings.redis_url) == ("m", 0, "redis://x")
    assert settings.tokenizer_path() == "m" and settings.max_n == 64
    dargs = parser.parse_args(["serve", "decoder", "--tokenizer", "t", "--max-batch", "3"])
    decoder_settings = DECODER.settings_from_args(dargs)
    assert (decoder_settings.tokenizer, decoder_settings.max_batch) == ("t", 3)
