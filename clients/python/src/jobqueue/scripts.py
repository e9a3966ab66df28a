"""The protocol's scripts: where they come from and how they are called.

One place loads them (the copies the build embedded in the package, ``jobqueue/lua/``;
an editable install reads the repository's ``lua/``; ``JOBQUEUE_LUA`` overrides both)
and one place calls them: :meth:`Scripts.call` sends ``EVALSHA`` with the SHA-1 of the
source and, when the server does not have the script (``NOSCRIPT``: a restart, a
failover, ``SCRIPT FLUSH``, another Cluster node), loads it there with ``SCRIPT LOAD``
and sends the call again (it did not run). Replies that say the command did not run
(``TRYAGAIN``, ``CLUSTERDOWN``, ``MASTERDOWN``, ``LOADING``) are sent again for up to 3
seconds. Nothing else is resent here: a lost reply is the caller's to handle (only
claim and settle_claim may be resent, with their request id).
"""
from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    NoScriptError,
    ResponseError,
    TryAgainError,
)

Arg = Union[bytes, str, int]

#: How long replies that say "not run, try again" are retried.
NOT_RUN_RETRY_SECONDS = 3.0


def _repository_lua() -> Optional[Path]:
    # src/jobqueue/scripts.py in the repository: clients/python/src/jobqueue -> lua/
    here = Path(__file__).resolve().parent
    for up in here.parents:
        candidate = up / "lua"
        if (candidate / "claim.lua").is_file() and (up / "clients" / "python").is_dir():
            return candidate
    return None


def lua_dir() -> Path:
    """Where the scripts are read from: ``JOBQUEUE_LUA``, else the copies embedded at
    build time, else (an editable install) the repository's ``lua/``."""
    env = os.environ.get("JOBQUEUE_LUA")
    if env:
        return Path(env)
    embedded = Path(__file__).resolve().parent / "lua"
    if any(embedded.glob("*.lua")):
        return embedded
    repo = _repository_lua()
    if repo is not None:
        return repo
    raise RuntimeError("jobqueue: the protocol's scripts are missing (no jobqueue/lua/*.lua in the package)")


def load_sources(directory: Optional[Path] = None) -> Dict[str, bytes]:
    """Every script, by name (``claim``, ``settle_claim``, ...), as bytes."""
    d = directory or lua_dir()
    return {p.stem: p.read_bytes() for p in sorted(d.glob("*.lua"))}


class ScriptError(ResponseError):
    """A script refused its call (``ERR jobqueue: invalid …``, a wrong-typed key)."""


class Scripts:
    """The loaded scripts and the one way to call them."""

    def __init__(self, sources: Optional[Mapping[str, bytes]] = None) -> None:
        self.sources: Dict[str, bytes] = dict(sources if sources is not None else load_sources())
        self.shas: Dict[str, str] = {n: hashlib.sha1(s).hexdigest() for n, s in self.sources.items()}

    async def load(self, client: Any, name: str, key: Optional[Arg] = None) -> None:
        """SCRIPT LOAD on the server that runs the calls: on a Cluster, the node that
        holds ``key``'s slot (a worker's ACL grants ``script|load``, not ``eval``)."""
        from redis.asyncio.cluster import RedisCluster

        if isinstance(client, RedisCluster) and key is not None:
            node = client.get_node_from_key(key.decode() if isinstance(key, bytes) else str(key))
            await client.execute_command("SCRIPT LOAD", self.sources[name], target_nodes=node)
        else:
            await client.script_load(self.sources[name])

    async def call(self, client: Any, name: str, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        """Run script ``name`` with ``keys`` (all of them, in protocol order) and ``args``
        (ARGV, from ARGV[1], the job-key prefix)."""
        sha = self.shas[name]
        loop = asyncio.get_running_loop()
        give_up = loop.time() + NOT_RUN_RETRY_SECONDS
        wait = 0.02
        while True:
            try:
                try:
                    return await client.evalsha(sha, len(keys), *keys, *args)
                except NoScriptError:
                    await self.load(client, name, keys[0] if keys else None)
                    return await client.evalsha(sha, len(keys), *keys, *args)
            except (TryAgainError, ClusterDownError, MasterDownError, BusyLoadingError):
                if loop.time() + wait > give_up:
                    raise
                await asyncio.sleep(wait)
                wait = min(wait * 2, 0.5)
            except ResponseError as err:
                if type(err) is ResponseError and str(err).startswith("jobqueue:"):
                    raise ScriptError(str(err)) from None
                raise
