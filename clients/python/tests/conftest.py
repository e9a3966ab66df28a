import os
import re
import sys
from typing import Iterator

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jobqueue  # noqa: E402
from support import RedisCluster, RedisServer  # noqa: E402


@pytest.fixture(scope="session")
def server() -> Iterator[RedisServer]:
    s = RedisServer()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def cluster() -> Iterator[RedisCluster]:
    c = RedisCluster()
    yield c
    c.stop()


@pytest.fixture
def tag(request: pytest.FixtureRequest) -> str:
    """A queue of the test's own, named after it."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", request.node.name)[:100]


@pytest.fixture
async def queue(server: RedisServer, tag: str):
    q = jobqueue.Queue.connect(tag, server.url)
    yield q
    await q.aclose()
