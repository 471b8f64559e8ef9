"""The object-store harness (tests/objectstore.py) works with the real clients.

moto's server stores and lists what obstore puts, the environment points a client in this process and in a
child process at it, polars reads from it; the fault proxy passes requests through, injects errors and
resets that obstore retries, delays responses; and endpoints that refuse or ignore connections fail within
the client options the harness recommends.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from http import HTTPStatus
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import obstore
import polars as pl
import pytest
from obstore.exceptions import GenericError
from obstore.store import S3Store

from tests.objectstore import (
    FAST_CLIENT_OPTIONS,
    FAST_RETRY,
    FaultProxy,
    S3Server,
    S3ServerError,
    SeenRequest,
    blackholed_endpoint,
    polars_storage_options,
    s3_store,
    unreachable_endpoint,
)

pytest_plugins = ["tests.objectstore"]


def _via(proxy: FaultProxy, bucket: str) -> S3Store:
    return s3_store(proxy.url, bucket, client_options=FAST_CLIENT_OPTIONS, retry_config=FAST_RETRY)


def _outcomes(proxy: FaultProxy) -> list[tuple[str, str]]:
    return [(seen.method, seen.outcome) for seen in proxy.seen]


# ------------------------------------------------------------------------------------------------ the server


def test_the_server_stores_lists_and_returns_objects(s3: S3Server, bucket: str) -> None:
    store = s3.store(bucket)
    assert s3.keys(bucket) == []

    obstore.put(store, "runs/a.jsonl", b'{"a": 1}\n')
    obstore.put(store, "runs/b.jsonl", b'{"b": 2}\n')
    obstore.put(store, "other.txt", b"x")

    assert s3.keys(bucket) == ["other.txt", "runs/a.jsonl", "runs/b.jsonl"]
    assert s3.keys(bucket, "runs") == ["runs/a.jsonl", "runs/b.jsonl"]
    assert s3.read(bucket, "runs/b.jsonl") == b'{"b": 2}\n'


@pytest.mark.parametrize("run", [1, 2])
def test_each_test_gets_a_bucket_of_its_own(s3: S3Server, bucket: str, run: int) -> None:
    assert s3.keys(bucket) == []  # the other run's object is in another bucket
    obstore.put(s3.store(bucket), "same-key", str(run).encode())


def test_the_environment_points_an_in_process_client_at_the_server(s3: S3Server, bucket: str) -> None:
    store = S3Store.from_url(f"s3://{bucket}/prefix")  # nothing but the environment the fixture set

    obstore.put(store, "k", b"from the environment")

    assert s3.keys(bucket) == ["prefix/k"]
    assert os.environ["AWS_ENDPOINT_URL"] == s3.url


def test_env_points_a_child_process_at_the_server(s3: S3Server, bucket: str) -> None:
    code = (
        "import sys, obstore\n"
        "from obstore.store import S3Store\n"
        "obstore.put(S3Store.from_url(sys.argv[1]), 'child.txt', b'from a child')\n"
    )
    env = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], **s3.env()}  # env() alone suffices

    subprocess.run([sys.executable, "-c", code, f"s3://{bucket}"], env=env, check=True, timeout=60)

    assert s3.read(bucket, "child.txt") == b"from a child"


def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    with pytest.raises(S3ServerError, match=r"not found.*moto"):
        S3Server(tmp_path, executable=tmp_path / "no-such-moto_server").start()

    crashing = tmp_path / "moto_server"
    crashing.write_text("#!/bin/sh\necho 'moto: cannot bind' >&2\nexit 3\n")
    crashing.chmod(0o755)
    with pytest.raises(S3ServerError, match=r"exited at start(.|\n)*moto: cannot bind"):
        S3Server(tmp_path, executable=crashing).start()


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(polars_storage_options, id="aws_-prefixed keys"),
        pytest.param(
            lambda url: {
                "endpoint": url,
                "access_key_id": "testing",
                "secret_access_key": "testing",
                "region": "us-east-1",
                "allow_http": "true",
            },
            id="unprefixed keys",
        ),
        pytest.param(lambda url: None, id="environment only"),
    ],
)
def test_polars_reads_parquet_from_the_server(
    s3: S3Server, bucket: str, options: Callable[[str], dict[str, str] | None]
) -> None:
    frame = pl.DataFrame({"turn": [1, 2, 3], "tokens": [10, 20, 30]})
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    obstore.put(s3.store(bucket), "export/turns.parquet", buffer.getvalue())

    read = pl.read_parquet(f"s3://{bucket}/export/turns.parquet", storage_options=options(s3.url))

    assert read.equals(frame)


# ------------------------------------------------------------------------------------------------ the proxy


def test_the_proxy_passes_requests_through(s3: S3Server, bucket: str, fault_proxy: FaultProxy) -> None:
    store = _via(fault_proxy, bucket)

    obstore.put(store, "k", b"through the proxy")
    assert bytes(obstore.get(store, "k").bytes()) == b"through the proxy"
    assert [meta["path"] for meta in obstore.list(store).collect()] == ["k"]

    assert fault_proxy.requests == 3
    assert fault_proxy.seen == [
        SeenRequest("PUT", f"/{bucket}/k", "forwarded"),
        SeenRequest("GET", f"/{bucket}/k", "forwarded"),
        SeenRequest("GET", f"/{bucket}?list-type=2", "forwarded"),
    ]
    assert s3.read(bucket, "k") == b"through the proxy"


@pytest.mark.parametrize("status", [HTTPStatus.SERVICE_UNAVAILABLE, HTTPStatus.INTERNAL_SERVER_ERROR])
def test_injected_errors_are_retried(
    s3: S3Server, bucket: str, fault_proxy: FaultProxy, status: HTTPStatus
) -> None:
    fault_proxy.fail_next(2, status)

    obstore.put(_via(fault_proxy, bucket), "k", b"after two errors")

    assert _outcomes(fault_proxy) == [("PUT", str(int(status)))] * 2 + [("PUT", "forwarded")]
    assert s3.read(bucket, "k") == b"after two errors"


def test_more_errors_than_retries_reach_the_caller(
    s3: S3Server, bucket: str, fault_proxy: FaultProxy
) -> None:
    fault_proxy.fail_next(FAST_RETRY["max_retries"] + 1)

    with pytest.raises(GenericError, match=r"after 2 retries(.|\n)*503 Service Unavailable"):
        obstore.put(_via(fault_proxy, bucket), "k", b"never stored")

    assert _outcomes(fault_proxy) == [("PUT", "503")] * 3
    assert s3.keys(bucket) == []


def test_an_error_answer_to_head_keeps_the_connection_usable(
    s3: S3Server, bucket: str, fault_proxy: FaultProxy
) -> None:
    store = _via(fault_proxy, bucket)
    obstore.put(store, "k", b"12345")
    fault_proxy.fail_next(1)

    assert obstore.head(store, "k")["size"] == 5  # an answer to HEAD has no body: none was sent
    assert bytes(obstore.get(store, "k").bytes()) == b"12345"

    assert _outcomes(fault_proxy) == [
        ("PUT", "forwarded"),
        ("HEAD", "503"),
        ("HEAD", "forwarded"),
        ("GET", "forwarded"),
    ]


@pytest.mark.parametrize("operation", ["PUT", "GET"])
def test_reset_connections_are_retried(
    s3: S3Server, bucket: str, fault_proxy: FaultProxy, operation: str
) -> None:
    store = _via(fault_proxy, bucket)
    obstore.put(s3.store(bucket), "existing", b"old")
    fault_proxy.reset_next(2)

    if operation == "PUT":
        obstore.put(store, "existing", b"new")
        assert s3.read(bucket, "existing") == b"new"
    else:
        assert bytes(obstore.get(store, "existing").bytes()) == b"old"

    assert _outcomes(fault_proxy) == [(operation, "reset")] * 2 + [(operation, "forwarded")]


def test_delayed_responses_arrive_late_or_time_out(bucket: str, fault_proxy: FaultProxy) -> None:
    obstore.put(_via(fault_proxy, bucket), "k", b"v")
    fault_proxy.delay_responses(0.3)

    started = time.monotonic()
    assert bytes(obstore.get(_via(fault_proxy, bucket), "k").bytes()) == b"v"
    assert time.monotonic() - started >= 0.3

    fault_proxy.delay_responses(2.0)
    impatient = s3_store(
        fault_proxy.url, bucket, client_options={"timeout": "200ms"}, retry_config={"max_retries": 0}
    )
    started = time.monotonic()
    with pytest.raises(GenericError, match="error sending request"):
        obstore.get(impatient, "k")
    assert time.monotonic() - started < 1.5

    fault_proxy.pass_through()
    started = time.monotonic()
    assert bytes(obstore.get(_via(fault_proxy, bucket), "k").bytes()) == b"v"
    assert time.monotonic() - started < 0.3


def test_the_proxy_relays_chunked_bodies_on_one_kept_alive_connection() -> None:
    connections: set[tuple[str, int]] = set()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_PUT(self) -> None:
            connections.add(self.client_address)
            received = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                received += self.rfile.read(size + 2)[:-2]
            self.rfile.readline()
            self._answer(HTTPStatus.OK, received[::-1])

        def do_GET(self) -> None:
            connections.add(self.client_address)
            self.send_response(HTTPStatus.OK)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"chunked ", b"response"):
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")

        def do_HEAD(self) -> None:
            connections.add(self.client_address)
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Length", "1000")
            self.end_headers()

        def do_DELETE(self) -> None:
            connections.add(self.client_address)
            self.send_response(HTTPStatus.NO_CONTENT)
            self.end_headers()

        def _answer(self, status: HTTPStatus, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serving = threading.Thread(target=upstream.serve_forever, args=(0.05,), daemon=True)
    serving.start()
    try:
        with FaultProxy(upstream.server_address[1]) as proxy:
            client = HTTPConnection("127.0.0.1", proxy.port, timeout=10)
            try:
                answers = []
                for method, body in [("PUT", iter([b"ab", b"cd"])), ("GET", None), ("HEAD", None)]:
                    client.request(method, "/x", body=body, encode_chunked=body is not None)
                    answers.append(client.getresponse().read())
                proxy.fail_next(1)
                client.request("GET", "/x")
                injected = client.getresponse()
                answers.append(injected.read())
                client.request("DELETE", "/x")
                answers.append(client.getresponse().read())
            finally:
                client.close()
    finally:
        upstream.shutdown()
        upstream.server_close()
        serving.join(timeout=5)

    assert answers[:3] == [b"dcba", b"chunked response", b""]
    assert injected.status == HTTPStatus.SERVICE_UNAVAILABLE
    assert b"<Code>SlowDown</Code>" in answers[3]
    assert answers[4] == b""
    assert [seen.outcome for seen in proxy.seen] == ["forwarded"] * 3 + ["503", "forwarded"]
    assert len(connections) == 1  # one client connection, one upstream connection, kept alive


def test_the_proxy_stops_its_threads_and_its_listener(s3: S3Server, bucket: str) -> None:
    with FaultProxy(s3.port) as proxy:
        store = _via(proxy, bucket)
        obstore.put(store, "k", b"v")  # while the store lives, its connection stays open in its pool
        assert proxy.alive_threads == 2  # the accept loop and the connection's
    assert proxy.alive_threads == 0
    with (
        pytest.raises(ConnectionRefusedError),
        socket.create_connection(("127.0.0.1", proxy.port), timeout=1),
    ):
        pass


# ---------------------------------------------------------------------------------------- dead endpoints


def test_an_unreachable_endpoint_fails_fast(bucket: str) -> None:
    store = s3_store(
        unreachable_endpoint(), bucket, client_options=FAST_CLIENT_OPTIONS, retry_config=FAST_RETRY
    )

    started = time.monotonic()
    with pytest.raises(GenericError, match=r"after 2 retries(.|\n)*error sending request"):
        obstore.put(store, "k", b"v")

    assert time.monotonic() - started < 2  # measured: about 0.04 s


def test_a_blackholed_endpoint_fails_after_the_connect_timeouts(bucket: str) -> None:
    with blackholed_endpoint() as endpoint:
        store = s3_store(endpoint, bucket, client_options=FAST_CLIENT_OPTIONS, retry_config=FAST_RETRY)
        started = time.monotonic()
        with pytest.raises(GenericError, match=r"after 2 retries(.|\n)*error sending request"):
            obstore.put(store, "k", b"v")
        elapsed = time.monotonic() - started

    assert 3 * 0.5 <= elapsed < FAST_RETRY["retry_timeout"] / timedelta(seconds=1)  # measured: about 1.6 s
