"""Where a dataset lives: a local folder or an object store (``s3://``, ``gs://``, ``az://``), in five calls.

Owns: telling a store URL from a path (``is_store_url``), and for either kind writing one object whole
(``put``: a single PUT, or a rename into place, so a reader sees the old object or the new one, never half),
reading one (``get``), listing a prefix (``keys``), deleting one (``delete``), and what polars needs to read
the same URLs (``Store.url_of``, ``Store.storage_options``). Must not: know what a dataset holds, print,
or log a credential. Object stores go through obstore, the Python face of the Rust ``object_store`` crate that
polars reads with; its credentials come from the standard chains and variables (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, profiles, instance roles;
``GOOGLE_APPLICATION_CREDENTIALS``, ``GOOGLE_SERVICE_ACCOUNT``; ``AZURE_STORAGE_*``), and
``AWS_ALLOW_HTTP=true``, ``GOOGLE_ALLOW_HTTP=true`` or ``AZURE_ALLOW_HTTP=true`` allows an ``http://``
endpoint. obstore is imported only for a URL.

Every failure is a ``CtxtoolError`` of one line naming the URL and the fix; none carries a credential (the
messages obstore gives name the request, never its signature).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from ctxtool.common.errors import CtxtoolError, OutputError

_URL = re.compile(r"^(s3|gs|az)://([^/]+)(/.*)?$")
# Bounded retries (object_store's backoff), so an unreachable endpoint fails within a minute: a connection
# is given up after 5 s, a request after 30 s, and retrying stops after 3 tries or 40 s, whichever is first.
_CLIENT = {"connect_timeout": "5s", "timeout": "30s"}
_RETRY = {"max_retries": 3, "retry_timeout": timedelta(seconds=40)}
# The variable of each scheme that allows plain HTTP (object_store's ``allow_http`` client option).
_ALLOW_HTTP = {"s3": "AWS_ALLOW_HTTP", "gs": "GOOGLE_ALLOW_HTTP", "az": "AZURE_ALLOW_HTTP"}
# Where each scheme's endpoint is set, for the hint of an unreachable one.
_ENDPOINT = {
    "s3": "AWS_ENDPOINT_URL",
    "gs": "the gcs_base_url of GOOGLE_SERVICE_ACCOUNT",
    "az": "AZURE_STORAGE_ENDPOINT, AZURITE_BLOB_STORAGE_URL",
}
# The service-account variables of object_store's GCS client, as polars' ``storage_options`` keys.
_GOOGLE_ACCOUNT = {
    "GOOGLE_SERVICE_ACCOUNT": "google_service_account",
    "GOOGLE_SERVICE_ACCOUNT_PATH": "google_service_account",
    "GOOGLE_SERVICE_ACCOUNT_KEY": "google_service_account_key",
}


def is_store_url(text: str | os.PathLike[str]) -> bool:
    """True for ``s3://bucket[/prefix]``, ``gs://…`` and ``az://…``."""
    return bool(_URL.match(str(text)))


class Store:
    """A dataset's root: ``Store.at(url_or_path)``. Keys are ``/``-separated and relative to the root."""

    def __init__(self, where: str) -> None:
        self.where = where.rstrip("/") if is_store_url(where) else where
        self.remote = is_store_url(where)
        self._obj: Any = None

    @classmethod
    def at(cls, where: str | os.PathLike[str]) -> Store:
        text = str(where)
        return cls(text if is_store_url(text) else os.path.abspath(os.path.expanduser(text)))

    def __str__(self) -> str:
        return self.where

    # --- the five calls -----------------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> None:
        """Write ``data`` as the object ``key``, whole: one PUT, or a hidden temporary file renamed."""
        if self.remote:
            self._call("write", key, lambda o, s: o.put(s, key, data, use_multipart=len(data) > 8 << 20))
            return
        from ctxtool.session.write import atomic_write  # only when writing: stats imports this module

        atomic_write(Path(self.where, key), data)

    def get(self, key: str) -> bytes | None:
        """The bytes of ``key``; None when there is no such object."""
        if self.remote:
            found = self._call("read", key, lambda o, s: o.get(s, key).bytes())
            return None if found is None else bytes(found)
        try:
            return Path(self.where, key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise CtxtoolError(
                f"{self.where}: cannot read {key} ({exc.strerror})", "Check the folder"
            ) from exc

    def keys(self, prefix: str) -> Iterator[tuple[str, int]]:
        """(key, size) of every object under ``prefix`` (a folder: ``requests/``), in no set order; hidden
        temporary files are not objects."""
        if self.remote:
            for batch in self._call("list", prefix, lambda o, s: list(o.list(s, prefix=prefix.rstrip("/")))):
                for meta in batch:
                    yield str(meta["path"]), int(meta["size"])
            return
        base = Path(self.where, prefix)
        for folder, dirs, files in os.walk(base):
            dirs.sort()
            rel = Path(folder).relative_to(self.where).as_posix()
            for name in sorted(files):
                if not name.startswith("."):
                    yield f"{rel}/{name}", os.stat(os.path.join(folder, name)).st_size

    def delete(self, key: str) -> None:
        if self.remote:
            self._call("delete", key, lambda o, s: o.delete(s, key))
            return
        try:
            Path(self.where, key).unlink(missing_ok=True)
        except OSError as exc:
            raise OutputError(self.where, exc) from exc

    # --- what polars reads ----------------------------------------------------------------------------

    def url_of(self, key: str) -> str:
        return f"{self.where}/{key}" if self.remote else os.path.join(self.where, key)

    def storage_options(self) -> dict[str, Any] | None:
        """polars' ``storage_options`` for this root: polars takes the same environment variables and chains
        as obstore, and retries on its own (``max_retries``). For ``gs://`` the ``GOOGLE_SERVICE_ACCOUNT*``
        variables are passed on as options: without one, polars asks google-auth (where it is installed) for
        application default credentials instead of reading the service account object_store reads."""
        if not self.remote:
            return None
        options: dict[str, Any] = {"max_retries": _RETRY["max_retries"]}
        if self.where.startswith("gs://"):
            for name, key in _GOOGLE_ACCOUNT.items():
                if os.environ.get(name):
                    options.setdefault(key, os.environ[name])
        return options

    # --- obstore ---------------------------------------------------------------------------------------

    def _store(self) -> Any:
        if self._obj is None:
            try:
                import obstore  # noqa: F401
                from obstore.store import from_url
            except ImportError as exc:  # pragma: no cover - a dependency of the wheel
                raise CtxtoolError(
                    f"{self.where}: the object-store library obstore is not installed", "pip install obstore"
                ) from exc
            try:
                client: dict[str, Any] = dict(_CLIENT)
                allow_http = _ALLOW_HTTP[self.where[:2]]
                if os.environ.get(allow_http, "").lower() in ("1", "true", "yes"):
                    client["allow_http"] = True  # (client options given replace those of the environment)
                self._obj = from_url(self.where, client_options=client, retry_config=_RETRY)  # type: ignore[call-overload]
            except Exception as exc:
                raise CtxtoolError(
                    f"{self.where}: not a usable store URL ({_one_line(exc)})",
                    "Check the URL and the store's environment variables (AWS_ENDPOINT_URL, AWS_REGION, …)",
                ) from exc
        return self._obj

    def _call(self, doing: str, key: str, fn: Any) -> Any:
        import obstore

        store = self._store()
        try:
            return fn(obstore, store)
        except (obstore.exceptions.NotFoundError, FileNotFoundError):
            if doing != "write":  # (nothing to read, list or delete)
                return [] if doing == "list" else None
            raise CtxtoolError(
                f"{self.where}: cannot {doing} {key}: the bucket or container does not exist",
                "Create it, or check the URL",
            ) from None
        except (obstore.exceptions.PermissionDeniedError, obstore.exceptions.UnauthenticatedError) as exc:
            raise CtxtoolError(
                f"{self.where}: cannot {doing} {key}: access denied ({_one_line(exc)})",
                "Check the credentials (AWS_ACCESS_KEY_ID/AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS, "
                "AZURE_STORAGE_*) and the bucket's policy",
            ) from None
        except Exception as exc:
            raise CtxtoolError(
                f"{self.where}: cannot {doing} {key} ({_one_line(exc)})",
                f"Check that the endpoint is reachable ({_ENDPOINT[self.where[:2]]}) and try again: nothing "
                "half-written is left",
            ) from None


def _one_line(exc: BaseException) -> str:
    """obstore's message, first line only and without the request's query string (which may carry a
    presigned credential)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"\?[^\s\"')]*", "?…", text)
    return text[:300]
