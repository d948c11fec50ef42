"""Named ranks and sizes of the image and table arrays the package checks at its boundaries.

Frames are channel-last RGB: one frame is ``(H, W, 3)``, a stack of frames (an episode, a clip, a
batch of frames) ``(N, H, W, 3)``, and a batch of clips ``(B, L, H, W, 3)``. The torch tokenizers
take channel-first ``(B, 3, H, W)``, the same rank as a stack. The reward scorers also accept grey
frames (one channel). A matrix is any two-dimensional array ``(rows, columns)``: actions
``(T, D)``, token ids ``(N, tokens)``, per-seed scores ``(seeds, items)``, a weight matrix.

Constants only: each check, and its error message, stays with the code that makes it.
"""

from __future__ import annotations

#: Channels of an RGB frame.
RGB_CHANNELS = 3
#: Channels of a grey frame.
GREY_CHANNELS = 1
#: Rank of one frame ``(H, W, C)``.
FRAME_NDIM = 3
#: Rank of a stack of frames ``(N, H, W, C)`` (or a channel-first batch ``(B, C, H, W)``).
FRAMES_NDIM = 4
#: Rank of a batch of clips ``(B, L, H, W, C)`` (or channel-first ``(B, L, C, H, W)``).
CLIPS_NDIM = 5
#: Rank of a matrix ``(rows, columns)``.
MATRIX_NDIM = 2
