"""What one client of the shuffler may hold (``ldp shuffle``'s defaults; standard library only,
so the CLI reads them without the shuffle extra)."""

#: Seconds a client connection may last, from its accept to its close (request and answer).
DEFAULT_CLIENT_TIMEOUT = 30.0
#: Client connections open at once; one more is answered 503 and closed.
DEFAULT_MAX_CONNECTIONS = 256
#: The Retry-After of that 503, in seconds.
OVERLOADED_RETRY_AFTER = 1
