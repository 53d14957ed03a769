"""A minimal JSON client for the harness's own calls to the API server (kubelet, control plane setup).

Tests use the official ``kubernetes`` client; the harness speaks plain HTTP so it controls content
types (merge patches to ``/status``) and watch streams without the client's model classes.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ApiError(RuntimeError):
    """The API server answered with an error status; ``code`` and ``reason`` are its Status fields."""

    def __init__(self, method: str, path: str, code: int, body: bytes) -> None:
        try:
            status = json.loads(body)
        except ValueError:
            status = {}
        self.code = code
        self.reason = str(status.get("reason", ""))
        self.message = str(status.get("message", body[:500].decode(errors="replace")))
        super().__init__(f"{method} {path}: HTTP {code} {self.reason}: {self.message}")


@dataclass
class KubeRest:
    url: str
    token: str
    ca_cert: Path
    _context: ssl.SSLContext = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._context = ssl.create_default_context(cafile=str(self.ca_cert))

    def _open(self, method: str, path: str, body: Any, content_type: str, timeout: float) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            return urllib.request.urlopen(request, timeout=timeout, context=self._context)
        except urllib.error.HTTPError as exc:
            raise ApiError(method, path, exc.code, exc.read()) from None

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Any:
        if params:
            path = f"{path}?{urllib.parse.urlencode(params)}"
        with self._open(method, path, body, content_type, timeout) as response:
            raw = response.read()
        if response.headers.get_content_type() == "application/json":
            return json.loads(raw)
        return raw.decode(errors="replace")

    def get(self, path: str, **params: str) -> Any:
        return self.call("GET", path, params=params)

    def merge_patch(self, path: str, body: Any) -> Any:
        return self.call("PATCH", path, body, content_type="application/merge-patch+json")

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 60) -> Iterator[dict[str, Any]]:
        """Events of one watch request (ends when the server closes it after ``timeout_seconds``)."""
        query = urllib.parse.urlencode(
            {
                "watch": "true",
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(timeout_seconds),
            }
        )
        with self._open("GET", f"{path}?{query}", None, "", timeout_seconds + 30) as response:
            for line in response:
                if line.strip():
                    yield json.loads(line)
