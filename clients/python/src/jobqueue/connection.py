"""Connecting to Redis: a standalone server (``redis://``, ``rediss://``), a Cluster, or
the primary behind Sentinel, with passwords, ACL users and TLS.

Every client made here has redis-py's automatic resend turned off (``Retry(NoBackoff(),
0)``): a resent script call could run twice (docs/protocol.md, Retrying a claim). The
package resends only what the protocol allows: claim and settle_claim with their
request id, and replies that say the command did not run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry


def _no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


@dataclass
class ConnectOptions:
    """How to reach Redis. ``url`` is a standalone server's (or a Cluster seed's)
    ``redis://[user:password@]host:port[/db]``; ``rediss://`` is TLS. Fields given here
    win over the URL's."""

    url: Optional[str] = None
    #: A Redis Cluster: ``url`` (or ``host``/``port``) is any one node.
    cluster: bool = False
    #: Sentinel: ``[(host, port), …]`` and the master's name; commands go to the primary
    #: and follow its failovers.
    sentinels: Optional[Sequence[Tuple[str, int]]] = None
    master_name: Optional[str] = None
    #: The Sentinels' own credentials, when they have them.
    sentinel_username: Optional[str] = None
    sentinel_password: Optional[str] = None
    host: str = "127.0.0.1"
    port: int = 6379
    db: int = 0
    username: Optional[str] = None
    password: Optional[str] = None
    #: TLS: ``tls=True`` (implied by ``rediss://``), the CA to trust, a client
    #: certificate and key for mutual TLS, and the name the server's certificate must hold.
    tls: bool = False
    tls_ca: Optional[str] = None
    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    tls_server_name: Optional[str] = None
    #: Seconds to wait for a connection.
    connect_timeout: float = 5.0
    extra: Dict[str, Any] = field(default_factory=dict)

    def _auth_tls(self) -> Dict[str, Any]:
        kw: Dict[str, Any] = {"retry": _no_retry(), "socket_connect_timeout": self.connect_timeout}
        if self.username is not None:
            kw["username"] = self.username
        if self.password is not None:
            kw["password"] = self.password
        tls = self.tls or bool(self.url and self.url.startswith("rediss://"))
        if tls:
            if not (self.url and self.url.startswith("rediss://")):
                kw["ssl"] = True  # a rediss:// URL chooses the TLS connection itself
            if self.tls_ca:
                kw["ssl_ca_certs"] = self.tls_ca
            if self.tls_cert:
                kw["ssl_certfile"] = self.tls_cert
            if self.tls_key:
                kw["ssl_keyfile"] = self.tls_key
            if self.tls_server_name is not None:
                kw["ssl_check_hostname"] = False
        kw.update(self.extra)
        return kw


def connect(options: Optional[ConnectOptions] = None, **kwargs: Any) -> Any:
    """A redis-py asyncio client for ``options`` (or the same fields as keywords):
    ``redis.asyncio.Redis``, ``redis.asyncio.cluster.RedisCluster``, or a Sentinel's
    master client."""
    o = options or ConnectOptions(**kwargs)
    kw = o._auth_tls()
    if o.sentinels:
        if not o.master_name:
            raise ValueError("invalid sentinel options: master_name is required with sentinels")
        sentinel_kwargs: Dict[str, Any] = {"socket_connect_timeout": o.connect_timeout}
        if o.sentinel_username is not None:
            sentinel_kwargs["username"] = o.sentinel_username
        if o.sentinel_password is not None:
            sentinel_kwargs["password"] = o.sentinel_password
        for k in ("ssl", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname"):
            if k in kw:
                sentinel_kwargs[k] = kw[k]
        sentinel = Sentinel(list(o.sentinels), sentinel_kwargs=sentinel_kwargs, **kw)  # type: ignore[no-untyped-call]
        return sentinel.master_for(o.master_name, db=o.db)
    if o.cluster:
        if o.url:
            return RedisCluster.from_url(o.url, **kw)
        return RedisCluster(host=o.host, port=o.port, **kw)
    if o.url:
        return aioredis.Redis.from_url(o.url, **kw)
    return aioredis.Redis(host=o.host, port=o.port, db=o.db, **kw)


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


__all__: List[str] = ["ConnectOptions", "connect", "is_cluster"]
