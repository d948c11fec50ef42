"""``exits_on_termination``: SIGTERM / SIGHUP become ``SystemExit`` in the main thread, only
inside the block; elsewhere nothing changes (tests/integration/test_run_terminated.py runs it
against a whole run)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from rlvr_world.apps.supervisor import exits_on_termination


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_inside_raises_system_exit_with_the_shell_code(sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(SystemExit) as info, exits_on_termination():
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the handler runs before this ends
        pytest.fail("the signal did not interrupt the block")
    assert info.value.code == 128 + sig
    assert signal.getsignal(sig) is before


def test_off_the_main_thread_it_changes_nothing() -> None:
    seen: list[object] = []

    def body() -> None:
        with exits_on_termination():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]
