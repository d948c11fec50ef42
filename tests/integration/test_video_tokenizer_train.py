"""Train the frame tokenizer briefly on real PushT frames with the ST-LPIPS term (slow)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the video tokenizer needs the video extra")
pytest.importorskip("stlpips_pytorch", reason="the perceptual loss needs stlpips-pytorch")

import torch
from torch.nn import functional

from rlvr_world.video.tokenizer import FrameTokenizer, TokenizerConfig
from rlvr_world.video.train_tokenizer import TrainSettings, train_tokenizer
from tests.helpers.shared import shared_files

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pusht_frames(episodes: int, size: int) -> np.ndarray:
    """The first ``episodes`` PushT episodes' frames, resized (antialiased) to ``size``."""
    paths = shared_files("ep*.npz", "data", "video", "pusht", need=episodes)
    out = []
    for path in paths:
        x = torch.from_numpy(np.load(path)["frames"]).permute(0, 3, 1, 2).float()
        y = functional.interpolate(x, size=(size, size), mode="bilinear", antialias=True)
        out.append(y.round().clamp(0, 255).byte().permute(0, 2, 3, 1).numpy())
    return np.concatenate(out)


def test_tokenizer_learns_pusht_frames(tmp_path: Path) -> None:
    frames = pusht_frames(4, 64)
    cfg = TokenizerConfig(channels=(32, 64, 128), input_patch=2)
    settings = TrainSettings(batch_size=8, perceptual_frames=2, eval_fraction=0.25, eval_every=10)
    metrics = train_tokenizer(frames, cfg, 40, tmp_path, settings=settings)
    first, last = metrics["history"][0], metrics["history"][-1]
    assert last["eval_psnr"] > first["eval_psnr"]
    assert last["perceptual"] < first["perceptual"]
    assert metrics["n_eval"] == 101  # the last of 4 episodes is held out
    model = FrameTokenizer.load(tmp_path)
    tokens = model.encode_frames(frames[:3])
    assert tokens.shape == (3, 64)
    assert (tmp_path / "recon.png").stat().st_size > 0
