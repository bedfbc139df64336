"""``--address`` where no Ray cluster answers: one clear error within seconds, exit 2, nothing
recorded (``ray.init`` itself retries a closed or silent port for minutes).

No Ray cluster is started here: the servers are plain sockets, and the gRPC one answers only
the first frame a real GCS sends (its SETTINGS frame, as captured from Ray 2.x)."""

from __future__ import annotations

import importlib.util
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import cli_in_process, write_spec
from opatlas.errors import OpatlasError
from opatlas.run.ray_executor import check_reachable, split_address
from opatlas.store import Store

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray")
# What a Ray GCS sent first, answering the HTTP/2 client preface: a SETTINGS frame (type 4).
GCS_FIRST_FRAME = bytes.fromhex("000018040000000000")


def free_port() -> int:
    """A port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A TCP server on 127.0.0.1 that accepts every connection and sends ``reply`` (or
    nothing) on each, keeping them open."""

    def __init__(self, reply: bytes = b"") -> None:
        self.reply, self.conns = reply, []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.reply:
                conn.sendall(self.reply)

    def close(self) -> None:
        for c in [*self.conns, self.sock]:
            c.close()


@pytest.fixture
def server_factory() -> Iterator[type[Server]]:
    made: list[Server] = []

    def make(reply: bytes = b"") -> Server:
        made.append(Server(reply))
        return made[-1]

    yield make  # type: ignore[misc]
    for s in made:
        s.close()


def test_split_address():
    assert split_address("10.0.0.1:6379") == ("10.0.0.1", 6379)
    assert split_address("ray://head:10001") == ("head", 10001)
    assert split_address("[::1]:6379") == ("::1", 6379)
    for left_to_ray in ("auto", "local", "head", "head:port", "http://head:8265", ":6379"):
        assert split_address(left_to_ray) is None


def test_closed_port_fails_at_once():
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(OpatlasError, match=rf"--address 127\.0\.0\.1:{port}: nothing answers "
                                           rf"there .*, so no Ray cluster answered; .*"
                                           rf"ray start --head --port {port}"):
        check_reachable(f"127.0.0.1:{port}")
    assert time.monotonic() - t0 < 5


def test_silent_port_fails_after_the_timeout(server_factory):
    srv = server_factory()
    t0 = time.monotonic()
    with pytest.raises(OpatlasError, match=rf"--address ray://127\.0\.0\.1:{srv.port}: no Ray "
                                           rf"cluster answered there \(the port accepts "
                                           rf"connections but nothing answered within 0\.5 s"):
        check_reachable(f"ray://127.0.0.1:{srv.port}", timeout_s=0.5)
    assert 0.4 < time.monotonic() - t0 < 5


def test_a_service_that_is_not_grpc_is_not_ray(server_factory):
    srv = server_factory(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    with pytest.raises(OpatlasError, match=r"does not speak gRPC, so it is not Ray: "
                                           r"b'HTTP/1.1 '"):
        check_reachable(f"127.0.0.1:{srv.port}", timeout_s=5)


def test_a_grpc_server_passes(server_factory):
    srv = server_factory(GCS_FIRST_FRAME)
    check_reachable(f"127.0.0.1:{srv.port}", timeout_s=5)  # no error: left to ray.init


def test_with_tls_only_the_connection_is_checked(server_factory, monkeypatch, capsys):
    monkeypatch.setenv("RAY_USE_TLS", "1")
    srv = server_factory()
    check_reachable(f"127.0.0.1:{srv.port}", timeout_s=0.5)
    assert "RAY_USE_TLS is on: only checked that" in capsys.readouterr().err
    with pytest.raises(OpatlasError, match="nothing answers there"):
        check_reachable(f"127.0.0.1:{free_port()}")


def run_against(capsys, tmp_path: Path, address: str, store: Path) -> tuple[int, str, float]:
    spec = write_spec(tmp_path / "s.yml", {"name": "faults", "op": "fault",
                                           "params": {"i": [0, 1, 2]}, "repeats": 1,
                                           "warmup": 0, "dtype": "fp32"})
    t0 = time.monotonic()
    code, _, err = cli_in_process(capsys, "run", str(spec), "--store", str(store),
                                  "--executor", "ray", "--address", address)
    return code, err, time.monotonic() - t0


def assert_nothing_recorded(store: Path) -> None:
    if store.exists():
        with Store(store, read_only=True) as st:
            assert (st.count(), st.count("vectors"), st.count("sweeps")) == (0, 0, 0)


@needs_ray
@pytest.mark.parametrize(("kind", "store_exists"),
                         [("closed", False), ("closed", True), ("silent", True)])
def test_cli_no_cluster_there(capsys, monkeypatch, tmp_path, server_factory, kind, store_exists):
    from opatlas.run import ray_executor

    monkeypatch.setattr(ray_executor, "PROBE_TIMEOUT_S", 1.0)  # the silent port's wait
    port = free_port() if kind == "closed" else server_factory().port
    store = tmp_path / "r.duckdb"
    if store_exists:
        with Store(store):
            pass
    address = f"127.0.0.1:{port}"
    code, err, wall = run_against(capsys, tmp_path, address, store)
    errors = [ln for ln in err.splitlines() if ln.startswith("opatlas: error")]
    assert code == 2 and "Traceback" not in err, err
    assert len(errors) == 1, err
    assert f"--address {address}: " in errors[0] and "no Ray cluster answered" in errors[0]
    assert "leave --address out to start Ray on this machine" in errors[0]
    assert wall < 30, f"took {wall:.1f} s"
    assert store.exists() == store_exists
    assert_nothing_recorded(store)
