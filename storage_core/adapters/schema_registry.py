"""A schema registry's REST API, the one call value decoding needs: ``GET <url>/schemas/ids/<id>``
(Confluent Schema Registry; Karapace and Apicurio's ``/apis/ccompat/v7`` serve the same). HTTP basic
credentials come from the driver's environment (``SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO`` = ``user:password``,
the client property Confluent calls ``basic.auth.user.info``; a Secret fills it), never from the URL or the
arguments, and travel to the Spark tasks inside the (pickled) client: executors need not have them."""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from storage_core.formats.value_decoding import RegisteredSchema, SchemaUnavailable

USER_INFO_ENV = "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO"
_SCHEMA_NOT_FOUND = 40403


@dataclass(frozen=True)
class SchemaRegistry:
    """Picklable (Spark tasks carry it): each task builds its own connections."""

    url: str
    user_info: str | None = field(default=None, repr=False)
    timeout_s: float = 30.0

    @classmethod
    def from_env(cls, url: str) -> SchemaRegistry:
        return cls(url, os.environ.get(USER_INFO_ENV) or None)

    def __call__(self, schema_id: int) -> RegisteredSchema | None:
        request = urllib.request.Request(
            f"{self.url.rstrip('/')}/schemas/ids/{schema_id}",
            headers={"Accept": "application/vnd.schemaregistry.v1+json, application/json"},
        )
        if self.user_info:
            token = base64.b64encode(self.user_info.encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and _error_code(exc) == _SCHEMA_NOT_FOUND:
                return None
            raise SchemaUnavailable(
                f"schema registry {self.url}: schema id {schema_id}: HTTP {exc.code}"
            ) from None
        except (OSError, ValueError) as exc:
            raise SchemaUnavailable(f"schema registry {self.url}: schema id {schema_id}: {exc}") from None
        return RegisteredSchema(
            str(body.get("schemaType") or "AVRO"), str(body["schema"]), bool(body.get("references"))
        )


def _error_code(exc: urllib.error.HTTPError) -> int | None:
    try:
        code = json.loads(exc.read()).get("error_code")
    except (OSError, ValueError, AttributeError):
        return None
    return int(code) if isinstance(code, int) else None
