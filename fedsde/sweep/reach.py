"""Is ``--scheduler`` a Dask scheduler?  A bounded check made before a sweep creates anything.

``distributed.Client(address)`` bounds the TCP connection but not the handshake that follows it: a peer that
accepts the connection and never answers (a silent listener, a firewall that holds connections) makes it wait for
ever, and a peer that answers in another protocol (an HTTP server such as Dask's own dashboard, port 8787) has its
first bytes read as a frame length (``HTTP/1.0`` is about 3.5·10¹⁸ bytes, and the client tries to allocate them).
:func:`check_scheduler` therefore, before the sweep folder is made:

1. opens a TCP connection (refused or unreachable: ``cannot connect``);
2. runs Dask's comm handshake and asks the peer for its ``identity``, the whole exchange within ``timeout``
   seconds; no answer in time, an answer that is not Dask's protocol, or a Dask server that is not a scheduler (a
   worker, say) is ``not a Dask scheduler``.

Each is a one-line :class:`~fedsde.errors.FedsdeInputError` (exit status 2 on the command line).  The bound is
:data:`HANDSHAKE_S`, or Dask's ``distributed.comm.timeouts.connect`` when that is shorter (e.g.
``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=5s``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
from typing import Any

from fedsde.errors import FedsdeInputError

#: seconds that the connection and the handshake with ``--scheduler`` may take together (at most)
HANDSHAKE_S = 20.0

_HINT = "the scheduler listens on port 8786 by default; 8787 is its dashboard"


def handshake_timeout() -> float:
    """:data:`HANDSHAKE_S`, or Dask's ``distributed.comm.timeouts.connect`` when that is shorter."""
    import dask
    from dask.utils import parse_timedelta

    configured = dask.config.get("distributed.comm.timeouts.connect", default=None)
    seconds = parse_timedelta(configured, default="seconds") if configured is not None else HANDSHAKE_S
    return min(HANDSHAKE_S, float(seconds))


def _summary(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    text = text if len(text) <= 120 else text[:117] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _identity(address: str, timeout: float) -> Any:
    from distributed.comm import connect
    from distributed.security import Security

    # the TLS settings of Dask's configuration, as distributed.Client takes them (none for tcp://)
    comm = await connect(address, timeout=timeout, **Security().get_connection_args("client"))
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def _ask_identity(address: str, timeout: float) -> Any:
    """The peer's answer to Dask's ``identity`` op, in a fresh event loop of its own thread (so that it works from
    inside a running loop too), bounded by ``timeout``."""

    def ask() -> Any:
        return asyncio.run(asyncio.wait_for(_identity(address, timeout), timeout))

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fedsde-scheduler-check") as pool:
        return pool.submit(ask).result(timeout + 5.0)


def check_scheduler(address: str, timeout: float | None = None) -> dict[str, Any]:
    """Check that a Dask scheduler answers at ``address`` (``tcp://HOST:PORT`` or ``tls://HOST:PORT``) within
    ``timeout`` seconds (default :func:`handshake_timeout`).

    Returns
    -------
    dict
        The scheduler's ``identity`` (``type``, ``address``, ``workers``, …).

    Raises
    ------
    FedsdeInputError
        One line naming ``--scheduler`` and its value: the address cannot be parsed, the connection is refused or
        times out (``cannot connect``), or the peer does not complete Dask's handshake and ``identity`` exchange
        in time or is not a scheduler (``not a Dask scheduler``).
    """
    from distributed.comm import parse_address, parse_host_port

    timeout = handshake_timeout() if timeout is None else float(timeout)
    what = f"--scheduler={address!r}"
    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location) if scheme in ("tcp", "tls") else (None, None)
    except (ValueError, TypeError) as exc:
        raise FedsdeInputError(f"{what}: not an address of the form tcp://HOST:PORT ({_summary(exc)})") from None
    if host is not None:  # other transports (inproc://, ucx://) go straight to Dask
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError as exc:
            raise FedsdeInputError(f"{what}: cannot connect ({_summary(exc)})") from None
    try:
        answer = _ask_identity(address, timeout)
    except TimeoutError:  # asyncio.TimeoutError and concurrent.futures.TimeoutError are this class (3.11+)
        raise FedsdeInputError(f"{what}: not a Dask scheduler (it accepted the connection but gave no Dask "
                               f"handshake within {timeout:g} s; {_HINT})") from None
    except Exception as exc:  # another protocol's bytes read as Dask frames: MemoryError, decoding errors, …
        raise FedsdeInputError(f"{what}: not a Dask scheduler (it does not answer in Dask's protocol: "
                               f"{_summary(exc)}; {_HINT})") from None
    kind = answer.get("type") if isinstance(answer, dict) else None
    if not (isinstance(kind, str) and "Scheduler" in kind):
        seen = f"a Dask {kind}" if isinstance(kind, str) else f"an answer of type {type(answer).__name__}"
        raise FedsdeInputError(f"{what}: not a Dask scheduler ({seen} answers there; {_HINT})")
    return answer
