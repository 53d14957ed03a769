"""A tiny schema registry on 127.0.0.1 speaking the part of Confluent Schema Registry's REST API that
producers and Tierkeeper's value decoding use: ``POST /subjects/<subject>/versions`` (register, answers
``{"id": N}``; the same schema text keeps its id) and ``GET /schemas/ids/<id>`` (``{"schema": ...}``, or
404 with ``error_code`` 40403). No real registry (Confluent's, Karapace, Apicurio) can be started from
the project's own files on a fresh machine, so the tests run the client against this one; it can also
require HTTP basic credentials and count its lookups."""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class TinyRegistry:
    def __init__(self, user_info: str | None = None) -> None:
        self.user_info = user_info
        self.schemas: dict[int, str] = {}
        self.lookups: list[int] = []
        self._lock = threading.Lock()
        self.url = ""

    def register(self, schema: dict[str, Any] | str) -> int:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        with self._lock:
            for schema_id, known in self.schemas.items():
                if known == text:
                    return schema_id
            schema_id = len(self.schemas) + 1
            self.schemas[schema_id] = text
            return schema_id

    def handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if registry.user_info is None:
                    return True
                want = "Basic " + base64.b64encode(registry.user_info.encode()).decode()
                if self.headers.get("Authorization") == want:
                    return True
                self._reply(401, {"error_code": 401, "message": "Unauthorized"})
                return False

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                match = re.fullmatch(r"/schemas/ids/(\d+)", self.path)
                if not match:
                    self._reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
                    return
                schema_id = int(match[1])
                registry.lookups.append(schema_id)
                text = registry.schemas.get(schema_id)
                if text is None:
                    self._reply(404, {"error_code": 40403, "message": "Schema not found"})
                else:
                    self._reply(200, {"schema": text})

            def do_POST(self) -> None:
                if not self._authorized():
                    return
                if not re.fullmatch(r"/subjects/[^/]+/versions", self.path):
                    self._reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self._reply(200, {"id": registry.register(body["schema"])})

        return Handler


@contextmanager
def tiny_registry(user_info: str | None = None) -> Iterator[TinyRegistry]:
    registry = TinyRegistry(user_info)
    server = ThreadingHTTPServer(("127.0.0.1", 0), registry.handler())
    registry.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
