"""The OpenAPI schema says every error an operation can really answer (drf-spectacular postprocessing hook).

Views document their own refusals; what every endpoint can answer through
the shared machinery is added here, in the API's error shape, where a view
did not say it: 400 (a NUL in a query parameter or the path, a page size or
cursor that is none, a body that is no acceptable JSON) and 404 (a path
naming nothing) where the path has parameters, and 401 (no token, a bad one) on
every operation that needs a token, so a generated client reads it as the
``Error`` it is (issue 36). 415 (a body that is not JSON) is said once, in the
API's description and as a shared ``components.responses``. A request body is
required wherever the operation refuses to go without one (all but
``OPTIONAL_BODIES``), so a generated client's function will not send none.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import FieldDoesNotExist
from drf_spectacular import openapi
from rest_framework import serializers

ERROR_REF = {"$ref": "#/components/schemas/Error"}
ERROR_SCHEMA = {
    "type": "object",
    "description": "Every refusal: a short code and a sentence for people (some refusals add fields).",
    "properties": {
        "error": {
            "type": "string",
            "description": "invalid, refused, not_found, conflict, precondition, not_authenticated, "
            "authentication_failed, method_not_allowed, unsupported_media_type, …",
        },
        "detail": {"type": "string", "description": "What was refused and why; names the field or parameter."},
    },
    "required": ["error", "detail"],
}
BAD_INPUT = (
    "invalid: a NUL in a parameter or the path, a bad limit or cursor, an offset, or a body that is not acceptable "
    "JSON; `detail` names it."
)
#: Said once for the whole API (every operation can answer them).
EVERYWHERE = {
    "Unauthenticated": "401 not_authenticated or authentication_failed: no token, or a bad or revoked one.",
    "NotJson": "415 unsupported_media_type: a body that is not application/json.",
}
NOTE = (
    '\n\nEvery refusal is `{"error": <code>, "detail": <a sentence naming the field>}`; some add fields. '
    "Any operation can answer 401 (no token, or a bad one) and, with a body, 415 (not JSON)."
)
METHODS = ("get", "put", "patch", "post", "delete")
UNAUTHENTICATED = "not_authenticated or authentication_failed: no token, or a bad or revoked one."
#: Operations whose body may be left out: every field has a default the operation acts on.
OPTIONAL_BODIES = {
    ("post", "/api/cards/{id}/cancel/"),  # the note is optional
    ("post", "/api/forge/pulls/{number}/merge/"),  # "anyway" defaults to false
}


def _response(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR_REF}}}


def document_errors(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Add the shared error responses (and the Error component) to every operation of ``result``; return it."""
    components = result.setdefault("components", {})
    components.setdefault("schemas", {}).setdefault("Error", ERROR_SCHEMA)
    for name, description in EVERYWHERE.items():
        components.setdefault("responses", {}).setdefault(name, _response(description))
    info = result.setdefault("info", {})
    if NOTE not in info.get("description", ""):
        info["description"] = info.get("description", "") + NOTE
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in METHODS:
                continue
            responses = operation.setdefault("responses", {})
            responses.setdefault("400", _response(BAD_INPUT))
            if "{" in path:
                responses.setdefault("404", _response("not_found: the path names nothing."))
            if _needs_token(operation):
                responses.setdefault("401", _response(UNAUTHENTICATED))
            body = operation.get("requestBody")
            if body is not None and method in ("post", "put", "patch") and (method, path) not in OPTIONAL_BODIES:
                body["required"] = True
    return result


def _needs_token(operation: dict[str, Any]) -> bool:
    """An operation that answers 401 without a token: it names a security scheme and not the empty one."""
    security = operation.get("security")
    return bool(security) and {} not in security


class AutoSchema(openapi.AutoSchema):
    """drf-spectacular's schema, with a read-only field taking null or "" from its model column.

    A field a serializer declares itself (``SlugRelatedField(read_only=True)``,
    a read-only choice) does not say whether its column is nullable or blank;
    the answer does send null and "", so the schema says so too.
    """

    def _map_serializer_field(self, field: Any, direction: Any, bypass_extensions: bool = False) -> Any:
        column = _column(field)
        if column is not None and field.read_only:
            if getattr(column, "null", False):
                field.allow_null = True
            if getattr(column, "blank", False) and isinstance(field, (serializers.CharField, serializers.ChoiceField)):
                field.allow_blank = True
        return super()._map_serializer_field(field, direction, bypass_extensions)


def _column(field: Any) -> Any:
    """The model field a ModelSerializer's field reads directly, or None."""
    parent = getattr(field, "parent", None)
    source = getattr(field, "source", "")
    if not isinstance(parent, serializers.ModelSerializer) or not source or source == "*" or "." in source:
        return None
    try:
        return parent.Meta.model._meta.get_field(source)
    except FieldDoesNotExist:
        return None
