"""What `yggc serve` was started with, as one frozen object the app reads."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import YggcError

DEFAULT_QUEUE = 8
MIN_BODY_BYTES = 1 << 20  # a request body may hold at least 1 MiB, or 32 bytes per context token


@dataclass(frozen=True)
class HttpLimits:
    """How much of a request the server reads, and for how long (the head in protocol.py, the body in guards.py).
    The sizes are llama-server's (cpp-httplib) and nginx's: an 8 KiB URL, 100 header fields."""
    header_timeout_s: float = 10.0  # a connection's first byte (or the last answer) to its request's last header: 408
    body_timeout_s: float = 30.0    # a request's head to its body's last byte: 408
    max_head_bytes: int = 16 << 10  # the request line and headers together: 431 (414 if the request line is longer)
    max_url_bytes: int = 8 << 10    # the request target, path and query: 414
    max_headers: int = 100          # header fields: 431

    def __post_init__(self):
        assert self.header_timeout_s > 0 and self.body_timeout_s > 0, "timeouts above zero"
        assert 0 < self.max_url_bytes <= self.max_head_bytes and self.max_headers > 0, "limits above zero"


@dataclass(frozen=True)
class ServeSettings:
    model_id: str               # the name clients send as "model" (GET /v1/models)
    api_key: str | None = None  # when set, /v1/* needs "Authorization: Bearer KEY"; an empty key is refused
    queue_size: int = DEFAULT_QUEUE  # requests waiting beyond the one decoding; more get 429
    created: int = 0            # the model's "created" time (the bundle's, in seconds)
    host: str = "127.0.0.1"     # the --host it listens on: without a key, requests must name it (guards.py)
    suffix: bool = False        # --suffix: every request drafts from its text's own repeats (Runtime.suffix_decoder)
    # its repeats join the drafter's tree: True with --with-suffix, False with --no-suffix, None as the runtime's
    # default (Runtime.suffix_branches_for)
    suffix_branches: bool | None = None
    limits: HttpLimits = field(default_factory=HttpLimits)

    def __post_init__(self):
        assert self.queue_size >= 1, "a queue of at least one request"
        # an empty key would turn authentication off without a word (fail open): refuse it, as a typo in
        # YGGC_API_KEY= or --api-key "$UNSET_VARIABLE" makes one
        if self.api_key is not None and not self.api_key.strip():
            raise YggcError(f"the API key is empty ({self.api_key!r}, from --api-key or YGGC_API_KEY); give a key, or "
                            "unset YGGC_API_KEY and leave out --api-key to serve without one")

    def max_body_bytes(self, max_seq: int) -> int:
        return max(MIN_BODY_BYTES, 32 * max_seq)
