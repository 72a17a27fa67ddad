"""What `yggc serve` was started with, as one frozen object the app reads."""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_QUEUE = 8
MIN_BODY_BYTES = 1 << 20  # a request body may hold at least 1 MiB, or 32 bytes per context token


@dataclass(frozen=True)
class ServeSettings:
    model_id: str               # the name clients send as "model" (GET /v1/models)
    api_key: str | None = None  # when set (not empty), /v1/* needs "Authorization: Bearer KEY"
    queue_size: int = DEFAULT_QUEUE  # requests waiting beyond the one decoding; more get 429
    created: int = 0            # the model's "created" time (the bundle's, in seconds)
    host: str = "127.0.0.1"     # the --host it listens on: without a key, requests must name it (guards.py)
    suffix: bool = False        # --suffix: every request drafts from its text's own repeats (Runtime.suffix_decoder)
    # its repeats join the drafter's tree: True with --with-suffix, False with --no-suffix, None as the runtime's
    # default (Runtime.suffix_branches_for)
    suffix_branches: bool | None = None

    def __post_init__(self):
        assert self.queue_size >= 1, "a queue of at least one request"
        # an empty key is no key, from --api-key "" or YGGC_API_KEY= alike (as vLLM reads VLLM_API_KEY): the
        # startup line, the auth check and the Host check all see None
        object.__setattr__(self, "api_key", self.api_key or None)

    def max_body_bytes(self, max_seq: int) -> int:
        return max(MIN_BODY_BYTES, 32 * max_seq)
