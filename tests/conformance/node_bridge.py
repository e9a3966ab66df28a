"""The conformance cases through the Node package's script-calling layer.

When JOBQUEUE_CONFORMANCE_NODE names the package's bridge (clients/node/dist/src/bridge.js),
jq.py's Q.ev sends each script call to that Node process (one JSON line per call) instead
of calling EVALSHA with redis-py; replies and errors come back as redis-py gives them.
scripts/conformance-node.sh runs the suite this way.
"""
import json, subprocess

from redis._parsers.base import BaseParser


class Bridge:
    def __init__(self, script, r):
        kw = r.connection_pool.connection_kwargs
        self.encoder = r.connection_pool.get_encoder()
        self.proc = subprocess.Popen(
            ['node', script, '--url', f"redis://{kw.get('host', '127.0.0.1')}:{kw['port']}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def call(self, name, keys, args):
        enc = lambda x: self.encoder.encode(x).hex()
        self.proc.stdin.write(json.dumps({'script': name, 'keys': [enc(k) for k in keys],
                                          'args': [enc(a) for a in args]}) + '\n')
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError('the Node bridge stopped')
        reply = json.loads(line)
        if 'err' in reply:
            raise BaseParser.parse_error(reply['err'])
        return _decode(reply['ok'])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


def _decode(v):
    if isinstance(v, dict):
        return bytes.fromhex(v['b'])
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return v


def install(Q, r, script):
    """Make Q.ev go through the bridge; returns the bridge (stop() it at exit)."""
    bridge = Bridge(script, r)

    def ev(self, name, extra_keys, *args, keys=None):
        k = self.K if keys is None else keys
        return bridge.call(name, [*k, *extra_keys], [self.jp, *args])

    Q.ev = ev
    return bridge
