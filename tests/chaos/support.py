"""Helpers of the chaos suite (not tests): test certificates, a sustained reward load that counts
what it sent, got, retried and lost, and the figures a fault test reports for ``make chaos``."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr_world.rewards.types import Status

REPO = Path(__file__).resolve().parents[2]
#: The message of a row whose scoring process was killed while it held the row.
DIED = "scoring process died"
#: Where each chaos test appends its figures (``make chaos`` prints them as a table).
REPORT_ENV = "RLVR_CHAOS_REPORT"


@dataclass(frozen=True)
class Certs:
    """A test CA, a server certificate for 127.0.0.1 / localhost and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certs(d: Path) -> Certs:
    """Certificates in ``d``, made with the ``openssl`` command line."""
    ca, ca_key = d / "ca.pem", d / "ca.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout",
             str(ca_key), "-out", str(ca), "-subj", "/CN=rlvr-test-ca")  # fmt: skip
    out: dict[str, tuple[Path, Path]] = {}
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        key, csr, cert, extfile = (d / f"{name}.{x}" for x in ("key", "csr", "pem", "ext"))
        extfile.write_text(ext + "\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
                 "-subj", f"/CN={name}")  # fmt: skip
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
                 "-CAcreateserial", "-days", "1", "-out", str(cert),
                 "-extfile", str(extfile))  # fmt: skip
        out[name] = (cert, key)
    return Certs(ca, *out["server"], *out["client"])


def report(test: str, **figures: Any) -> None:
    """Append one test's figures to ``$RLVR_CHAOS_REPORT`` (when set) as a JSON line."""
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"test": test, **figures}) + "\n")


@dataclass
class LoadStats:
    """What a load generator saw: calls sent, answered, failed after every retry, and the
    retries the client made (``RewardClient.retries``). ``died``: answered, but with status
    ``error`` "scoring process died" for some rows: the documented answer for the rows a scoring
    process held when it was killed (``services.reward.pool``), not a failure of the service.
    ``lost``: sent but never answered nor failed (must be 0)."""

    sent: int = 0
    ok: int = 0
    failed: int = 0
    died: int = 0
    retried: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.sent - self.ok - self.failed - self.died


class RewardLoad:
    """``threads`` threads scoring web rows through one ``RewardClient`` until ``stop()``:
    sustained load on every address the client has."""

    def __init__(self, client: Any, threads: int = 4, batch: int = 8) -> None:
        self.client = client
        self.stats = LoadStats()
        self._rows = [_web_row(i) for i in range(batch)]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                self.stats.sent += 1
            try:
                results = self.client.score_verl_batch(self._rows)
                ok = len(results) == len(self._rows) and all(r.reward == 1.0 for r in results)
                bad = [r for r in results if r.reward != 1.0]
                died = len(results) == len(self._rows) and all(
                    r.status == Status.ERROR and DIED in r.message for r in bad
                )
                with self._lock:
                    if ok:
                        self.stats.ok += 1
                    elif died:
                        self.stats.died += 1
                    else:
                        self.stats.failed += 1
                        self.stats.errors.append(f"wrong answer: {bad[:1] or results}")
            except Exception as exc:  # counted, the load goes on
                with self._lock:
                    self.stats.failed += 1
                    self.stats.errors.append(f"{type(exc).__name__}: {exc}"[:300])

    def start(self) -> RewardLoad:
        for t in self._threads:
            t.start()
        return self

    def wait_answers(self, n: int, timeout_s: float = 120.0) -> None:
        """Until ``n`` more calls were answered (progress, not a clock)."""
        target = self.stats.ok + n
        deadline = time.monotonic() + timeout_s
        while self.stats.ok < target:
            if time.monotonic() > deadline:
                raise AssertionError(f"load made no progress: {self.stats}")
            time.sleep(0.01)

    def stop(self) -> LoadStats:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=300)
        self.stats.retried = int(self.client.retries)
        return self.stats


TRUTH = "New items:\nNone\n\nDeleted items:\n[3] button 'Go'\n\nUpdated items:\nNone"


def _web_row(i: int) -> dict[str, Any]:
    return {"data_source": "web_agent", "solution_str": TRUTH, "ground_truth": TRUTH, "i": i}


def wait_until(predicate: Any, timeout_s: float, what: str, poll_s: float = 0.02) -> float:
    """Poll ``predicate`` until true; the monotonic time it became true."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(poll_s)
    return time.monotonic()
