"""Pure checks of the decoder service: special-token modes and vocabulary bounds."""

from __future__ import annotations

import pytest

from services.decoder.text import InvalidDecodeRequest, check_ids, check_mode


def test_modes_keep_is_the_default_and_unknown_modes_are_named() -> None:
    assert check_mode("") is False
    assert check_mode("keep") is False
    assert check_mode("skip") is True
    with pytest.raises(InvalidDecodeRequest, match=r"requests\[2\]\.special_tokens = 'SKIP'"):
        check_mode("SKIP", "requests[2].special_tokens")


def test_ids_are_checked_against_the_vocabulary() -> None:
    assert check_ids([0, 9], 10) == [0, 9]
    assert check_ids([], 10) == []
    with pytest.raises(InvalidDecodeRequest, match=r"token_ids\[1\] = 10 is outside .*\[0, 10\)"):
        check_ids([3, 10, 11], 10)
    with pytest.raises(InvalidDecodeRequest, match=r"token_ids\[0\] = -1"):
        check_ids([-1], 10)
