"""What one client of the shuffler may hold (``ldp shuffle``'s defaults; standard library only,
so the CLI reads them without the shuffle extra)."""

from __future__ import annotations

#: Seconds a client connection may last, from its accept to its close (request and answer).
DEFAULT_CLIENT_TIMEOUT = 30.0
#: Client connections open at once; one more is answered 503 and closed.
DEFAULT_MAX_CONNECTIONS = 256
#: The Retry-After of that 503, in seconds.
OVERLOADED_RETRY_AFTER = 1
#: Descriptors the shuffler needs besides its device connections: standard streams, the
#: listening socket, the staging database (file, WAL, shared memory), the forwarder's
#: connections to the collector, the connection accepted past the cap to be answered 503, the
#: selector werkzeug opens at the end of each request, and some room for the interpreter.
DESCRIPTOR_RESERVE = 32


def open_file_limit() -> int | None:
    """The process's soft limit on open descriptors (``RLIMIT_NOFILE``); ``None`` where there
    is none to read (Windows has no ``resource`` module) or it is unlimited."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    return int(soft)


def descriptor_warning(max_connections: int, limit: int | None = None) -> str | None:
    """What to log at start when ``max_connections`` leaves too few descriptors: the rule is
    ``max_connections + DESCRIPTOR_RESERVE > RLIMIT_NOFILE`` (soft limit; ``limit`` replaces
    it). ``None`` when there is room, or no limit to compare with.

    Past the limit, connections under the cap wait unaccepted in the kernel's queue (a device's
    ``GET /healthz`` waited seconds behind 200 idle connections under ``ulimit -n 128``) until
    ``--client-timeout`` frees descriptors, with nothing said; the staging database and the
    forwarder fail to open files as well."""
    if limit is None:
        limit = open_file_limit()
    if limit is None or max_connections + DESCRIPTOR_RESERVE <= limit:
        return None
    return (
        f"--max-connections {max_connections} leaves too few of the process's {limit} open "
        f"files (RLIMIT_NOFILE; the shuffler needs about {DESCRIPTOR_RESERVE} more for its "
        "database, the forwarder and itself): past the limit, devices' connections wait "
        "unanswered until --client-timeout frees descriptors. Raise the limit (ulimit -n "
        f"{max_connections + DESCRIPTOR_RESERVE} or more, LimitNOFILE= under systemd) or lower "
        f"--max-connections to {max(1, limit - DESCRIPTOR_RESERVE)} or less "
        "(LDP_SHUFFLE_MAX_CONNECTIONS)."
    )
