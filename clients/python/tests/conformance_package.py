"""The repository's conformance cases (tests/conformance/) run through this package's
script layer: every script call of jq.py's `Q.ev` goes through `jobqueue.Queue.run`
(and so `jobqueue.Scripts.call`: EVALSHA by the source's SHA-1, SCRIPT LOAD on NOSCRIPT,
the package's embedded copies of lua/) on an asyncio client, instead of redis-py's
EVALSHA of the scripts jq.py loaded itself. The cases and their checks are unchanged.

    python clients/python/tests/conformance_package.py

prints one line per case and `conformance via the Python package (MODE): N passed, M
failed`; JOBQUEUE_CONFORMANCE_MODE=cluster runs the cases on a 3-master Cluster through
the package's Cluster client.
"""
import asyncio
import io
import re
import os
import sys
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
CONFORMANCE = os.path.join(HERE, "..", "..", "..", "tests", "conformance")
sys.path.insert(0, CONFORMANCE)

import redis.asyncio as aioredis  # noqa: E402

import jobqueue  # noqa: E402
import jq  # noqa: E402  (starts the private redis-server)
import test_scripts  # noqa: E402

loop = asyncio.new_event_loop()
if getattr(jq, "CLUSTER", False):
    # JOBQUEUE_CONFORMANCE_MODE=cluster: the package's Cluster client, any node a seed
    seed = jq.r.get_default_node()
    client = jobqueue.connect(host=seed.host, port=seed.port, cluster=True)
else:
    client = aioredis.Redis(**{k: v for k, v in jq.r.connection_pool.connection_kwargs.items() if k in ("host", "port")})
scripts = jobqueue.Scripts()


calls = 0


def ev(self, name, extra_keys, *args, keys=None):
    """jq.Q.ev through the package: the same KEYS and ARGV, sent by jobqueue.Scripts."""
    global calls
    calls += 1
    k = self.K if keys is None else keys
    return loop.run_until_complete(scripts.call(client, name, [*k, *extra_keys], [self.jp, *args]))


jq.Q.ev = ev


def main() -> int:
    out = io.StringIO()
    with redirect_stdout(out):
        code = test_scripts.main()
    text = out.getvalue()
    # the runner's closing line, named for this mode (CI counts the package's pytest line)
    sys.stdout.write(re.sub(r"^conformance( \([a-z]+\))?: ", r"conformance via the Python package\1: ", text, flags=re.M))
    print(f"script calls through the package: {calls}")
    return code


if __name__ == "__main__":
    try:
        code = main()
    finally:
        loop.run_until_complete(client.aclose())
        jq.stop_server()
    sys.exit(code)
