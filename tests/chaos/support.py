"""Helpers of the chaos suite (not tests): test certificates, and the figures a fault test
reports for ``make chaos`` to print."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
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
