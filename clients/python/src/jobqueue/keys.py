"""The key layout of a queue, built in exactly one place (docs/protocol.md, Keys).

Every key of a queue starts with ``PREFIX:{tag}:``, so all of them hash to one Redis
Cluster slot and every script call is a single-slot call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Union

DEFAULT_PREFIX = "jq"
MAX_TAG_LEN = 256
MAX_ID_LEN = 1024

Id = Union[str, bytes]


def id_bytes(job_id: Id) -> bytes:
    """An id as the bytes Redis stores. Text ids are UTF-8; an id read back from Redis
    that is not UTF-8 round-trips through ``surrogateescape``."""
    if isinstance(job_id, bytes):
        return job_id
    return job_id.encode("utf-8", "surrogateescape")


def id_text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def validate_id(job_id: Id) -> bytes:
    raw = id_bytes(job_id)
    if not 1 <= len(raw) <= MAX_ID_LEN:
        raise ValueError(f"invalid job id: expected 1..{MAX_ID_LEN} bytes, got {len(raw)} bytes")
    return raw


@dataclass(frozen=True)
class QueueKeys:
    """The names of one queue's keys, as bytes (ids may be any bytes)."""

    name: str
    pending: bytes
    processing: bytes
    delayed: bytes
    dead: bytes
    meta: bytes
    stats: bytes
    wake: bytes
    orphans: bytes
    job_prefix: bytes
    claimreq_prefix: bytes

    @classmethod
    def new(cls, tag: str, prefix: str = DEFAULT_PREFIX) -> "QueueKeys":
        if not tag:
            raise ValueError("invalid hash tag: must not be empty")
        if len(tag.encode()) > MAX_TAG_LEN:
            raise ValueError(f"invalid hash tag: {len(tag.encode())} bytes, at most {MAX_TAG_LEN}")
        if "{" in tag or "}" in tag:
            raise ValueError(f"invalid hash tag {tag!r}: must not contain braces (write `emails`, not `{{emails}}`)")
        if not prefix or "{" in prefix or "}" in prefix:
            raise ValueError(f"invalid key prefix {prefix!r}: must be non-empty, without braces")
        name = f"{prefix}:{{{tag}}}"

        def key(suffix: str) -> bytes:
            return f"{name}:{suffix}".encode()

        return cls(
            name=name,
            pending=key("pending"),
            processing=key("processing"),
            delayed=key("delayed"),
            dead=key("dead"),
            meta=key("meta"),
            stats=key("stats"),
            wake=key("wake"),
            orphans=key("orphans"),
            job_prefix=key("job:"),
            claimreq_prefix=key("claimreq:"),
        )

    def queue_keys(self) -> List[bytes]:
        """KEYS[1..7] of every script, in protocol order."""
        return [self.pending, self.processing, self.delayed, self.dead, self.meta, self.stats, self.wake]

    def job(self, job_id: Id) -> bytes:
        return self.job_prefix + id_bytes(job_id)

    def claim_request(self, request: str) -> bytes:
        return self.claimreq_prefix + request.encode()
