"""``fedsde sweep --scheduler`` pointed at something that is not a Dask scheduler: one line, exit 2, in bounded
time, nothing written.  The peers are servers of this test on the loopback address, which stop by themselves."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from pathlib import Path

import pytest

from fedsde.errors import FedsdeInputError
from fedsde.sweep import reach
from tests.helpers import one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = str(ROOT / "examples" / "problems" / "paper_table.toml")
HANG_GUARD_S = 60  # a hang guard, not a speed assertion


@contextlib.contextmanager
def silent_listener():
    """A TCP listener that accepts connections (the kernel completes them) and never says a word."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield f"tcp://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


@contextlib.contextmanager
def http_server():
    """An HTTP server as a Dask dashboard's port has one: it answers a request that is not HTTP with a 400 status
    (for at most 60 s)."""

    class BadRequest(socketserver.BaseRequestHandler):  # a request that is not HTTP gets a 400 at once
        def handle(self):
            self.request.settimeout(2)
            with contextlib.suppress(OSError):
                if self.request.recv(65536):
                    self.request.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\n"
                                         b"Content-Length: 11\r\n\r\nBad Request")

    server = socketserver.TCPServer(("127.0.0.1", 0), BadRequest)
    server.timeout = 0.2
    stop = threading.Event()

    def serve():
        deadline = time.monotonic() + HANG_GUARD_S
        for _ in range(int(HANG_GUARD_S / server.timeout)):  # bounded: one request or a 0.2 s wait each
            if stop.is_set() or time.monotonic() > deadline:
                break
            server.handle_request()
        server.server_close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        thread.join(5)


def _spec(tmp_path: Path) -> Path:
    spec = tmp_path / "s.toml"
    spec.write_text(f'[run]\ncommand = "simulate"\nseed = 1\n[base]\nproblem = "{PROBLEM}"\nrounds = 2\n'
                    "replicates = 4\nlocal_steps = 1\n[grid]\neta = [0.05]\n")
    return spec


@pytest.mark.parametrize("peer, needle", [(silent_listener, "gave no Dask handshake within 2 s"),
                                          (http_server, "does not answer in Dask's protocol")],
                         ids=["silent-listener", "http-server"])
def test_not_a_dask_scheduler_is_one_line_and_leaves_nothing(peer, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(reach, "HANDSHAKE_S", 2.0)
    out = tmp_path / "a" / "results"
    with peer() as address:
        t0 = time.monotonic()
        code, stdout, stderr = run_cli(capsys, ["sweep", str(_spec(tmp_path)), "--out", str(out),
                                                "--scheduler", address])
        assert time.monotonic() - t0 < HANG_GUARD_S  # hang guard (the issue asks for a bounded time), not speed
    one_line_error(code, stdout, stderr, f"--scheduler={address!r}: not a Dask scheduler", needle, "8786")
    assert not (tmp_path / "a").exists()  # no sweep folder, not even its parent


def test_refused_connection_and_bad_addresses(tmp_path):
    with silent_listener() as address:
        pass  # closed: nothing listens on that port any more
    with pytest.raises(FedsdeInputError, match=r"--scheduler='tcp://127\.0\.0\.1:\d+': cannot connect \("):
        reach.check_scheduler(address, timeout=2)
    with pytest.raises(FedsdeInputError, match=r"--scheduler='tcp://127\.0\.0\.1': not an address of the form"):
        reach.check_scheduler("tcp://127.0.0.1", timeout=2)


def test_the_bound_follows_a_shorter_dask_connect_timeout(monkeypatch):
    import dask

    assert reach.handshake_timeout() <= reach.HANDSHAKE_S
    with dask.config.set({"distributed.comm.timeouts.connect": "3s"}):
        assert reach.handshake_timeout() == 3.0
    with dask.config.set({"distributed.comm.timeouts.connect": "90s"}):
        assert reach.handshake_timeout() == reach.HANDSHAKE_S
