"""The tests' harness: private redis-servers (standalone, with ACL users, a 3-master
Cluster) on free loopback ports, the Rust `jobqueue` binary, and `eventually`."""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Awaitable, Callable, List, Optional, TypeVar

import redis

REPO = Path(__file__).resolve().parents[3]
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One redis-server process, killed by stop()."""

    def __init__(self, extra: Optional[List[str]] = None, ports: int = 0) -> None:
        binary = os.environ.get("REDIS_SERVER", "redis-server")
        self.dir = tempfile.mkdtemp(prefix="jobqueue-py-")
        for _ in range(20):
            self.port = free_port()
            self.others = [free_port() for _ in range(ports)]
            args = [a.format(*self.others) for a in (extra or [])]
            self.proc = subprocess.Popen(
                [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", self.dir, "--logfile", os.path.join(self.dir, "redis.log"), *args],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_up():
                return
            self.proc.kill()
            self.proc.wait()
        raise RuntimeError(f"redis-server did not start: {self.log()}")

    def _wait_up(self) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    reply = s.recv(64)
                    if reply.startswith((b"+PONG", b"-NOAUTH", b"-LOADING")):
                        return not reply.startswith(b"-LOADING")
            except OSError:
                pass
            time.sleep(0.01)
        return False

    def log(self) -> str:
        try:
            return Path(self.dir, "redis.log").read_text()[-2000:]
        except OSError:
            return ""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def client(self, **kw: object) -> redis.Redis:
        return redis.Redis(port=self.port, **kw)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """Three masters, slots split evenly, formed with CLUSTER ADDSLOTSRANGE and MEET
    (as tests/support/redis.rs does)."""

    def __init__(self) -> None:
        self.nodes = [RedisServer(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                   "--cluster-port", "{0}"], ports=1) for _ in range(3)]
        ranges = [(0, 5460), (5461, 10922), (10923, 16383)]
        for epoch, (node, (lo, hi)) in enumerate(zip(self.nodes, ranges)):
            c = node.client()
            c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", epoch + 1)
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        first = self.nodes[0].client()
        for node in self.nodes[1:]:
            first.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, node.others[0])
        deadline = time.monotonic() + 30
        for node in self.nodes:
            while True:
                info = node.client().execute_command("CLUSTER", "INFO").decode()
                if "cluster_state:ok" in info and "cluster_known_nodes:3" in info:
                    break
                assert time.monotonic() < deadline, f"the cluster did not form: {info}"
                time.sleep(0.02)

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


def jobqueue_bin() -> str:
    """The Rust CLI: JOBQUEUE_BIN, else target/debug/jobqueue under CARGO_TARGET_DIR or
    the repository (scripts/python-client.sh builds it)."""
    env = os.environ.get("JOBQUEUE_BIN")
    if env:
        return env
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    path = target / "debug" / "jobqueue"
    assert path.is_file(), f"{path} is missing: build it with `cargo build --bin jobqueue` (scripts/python-client.sh does)"
    return str(path)


async def eventually(check: Callable[[], Awaitable[T]], what: str, timeout: float = 20.0) -> T:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what} (last: {got!r})"
        await asyncio.sleep(0.02)


def openssl(directory: str, *args: str) -> None:
    out = subprocess.run(["openssl", *args], cwd=directory, capture_output=True, text=True)
    assert out.returncode == 0, f"openssl {args}: {out.stderr}"


def make_certs(directory: str) -> None:
    """ca.crt, a server certificate for 127.0.0.1 and a client certificate signed by it
    (as tests/support/certs.rs makes them)."""
    openssl(directory, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=jobqueue test ca",
            "-keyout", "ca.key", "-out", "ca.crt")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
                      ("client", "extendedKeyUsage=clientAuth\n")):
        openssl(directory, "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
                "-out", f"{name}.csr")
        Path(directory, f"{name}.ext").write_text(ext)
        openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.crt")


def start_sentinel(directory: str, primary: int) -> subprocess.Popen:
    """One Sentinel (quorum 1) that monitors the server on `primary` as `mymaster`;
    returns the process, its port in `.port`."""
    binary = os.environ.get("REDIS_SERVER", "redis-server")
    port = free_port()
    conf = Path(directory, f"sentinel-{port}.conf")
    conf.write_text(f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {directory}\n"
                    f"sentinel monitor mymaster 127.0.0.1 {primary} 1\n"
                    f"sentinel down-after-milliseconds mymaster 1000\n")
    proc = subprocess.Popen([binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.port = port  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while True:
        try:
            r = redis.Redis(port=port)
            if r.execute_command("SENTINEL", "get-master-addr-by-name", "mymaster"):
                return proc
        except redis.ConnectionError:
            pass
        assert time.monotonic() < deadline and proc.poll() is None, "the Sentinel did not start"
        time.sleep(0.02)
