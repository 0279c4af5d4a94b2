"""The one error shape of the REST API: ``{"error": <code>, "detail": <a sentence for people>}``.

``exception_handler`` (``REST_FRAMEWORK["EXCEPTION_HANDLER"]``) gives every
exception DRF answers that shape: a validation error becomes ``invalid``
with the first refusal naming its field (``name: …``) and DRF's per-field
lists kept beside it (``"name": ["…"]``), the others keep DRF's
own code (``not_found``, ``not_authenticated``, ``method_not_allowed``, …)
except ``permission_denied``, which is ``refused`` like our own refusals, and
``parse_error``, which is ``invalid``. A body that already has ``error`` is
kept as it is, with any extra fields.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from singularity.apikit.camel import camel

#: DRF's default codes that we name otherwise.
CODES = {"permission_denied": "refused", "parse_error": "invalid", "invalid": "invalid"}


class BadParameter(exceptions.APIException):
    """A query parameter the endpoint does not take: 400 ``invalid`` with ``detail`` naming it."""

    status_code = 400
    default_code = "invalid"


def error_response(code: str, detail: str, status: int) -> Response:
    return Response({"error": code, "detail": detail}, status=status)


def first_error(errors: Any, where: str = "") -> str:
    """The first refusal in DRF's error structure as ``<field>: <why>`` (``rows[3].name: …`` when nested)."""
    if isinstance(errors, list):
        for index, item in enumerate(errors):
            if item:
                inner = f"{where}[{index}]" if isinstance(item, (dict, list)) and len(errors) > 1 else where
                return first_error(item, inner)
        return f"{where or 'body'}: not valid"
    if isinstance(errors, dict):
        if not errors:
            return f"{where or 'body'}: not valid"
        field, messages = next(iter(errors.items()))
        if field in ("non_field_errors", "detail"):
            label = where
        elif isinstance(field, int) or str(field).isdigit():
            label = f"{where}[{field}]"
        else:
            label = f"{where}.{camel(str(field))}" if where else camel(str(field))
        return first_error(messages, label)
    return f"{where or 'body'}: {errors}"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, with the body made ``{"error", "detail"}``; None (a crash) is left to the middleware."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(*exc.args)
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(data, dict) and isinstance(data.get("error"), str) and "detail" in data:
        return response
    if isinstance(exc, exceptions.ValidationError):
        body = {"error": "invalid", "detail": first_error(data)}
        if isinstance(data, dict):  # each field's own refusals stay beside the sentence
            body.update({k: v for k, v in data.items() if k not in body})
        response.data = body
        return response
    code = getattr(exc, "default_code", "error")
    if isinstance(exc, exceptions.APIException) and isinstance(exc.detail, exceptions.ErrorDetail):
        code = exc.detail.code or code
    detail = data.get("detail", "") if isinstance(data, dict) else first_error(data)
    body = {"error": CODES.get(str(code), str(code)), "detail": str(detail)}
    if isinstance(data, dict):
        body.update({k: v for k, v in data.items() if k not in body})
    response.data = body
    return response
