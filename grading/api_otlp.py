"""``POST /v1/traces``: OTLP/HTTP traces in, from any OpenTelemetry exporter, with the API's bearer tokens.

The body is an ``ExportTraceServiceRequest`` in protobuf
(``application/x-protobuf``) or OTLP/JSON (``application/json``), gzip or
not (``Content-Encoding``). The answer is an ``ExportTraceServiceResponse``
in the request's encoding: 200, with ``partial_success`` (``rejected_spans``
and an ``error_message`` giving the reasons) when some spans were refused —
a span with bad ids or times, a trace naming no entity. A body the server
cannot read is a 400, one over its size or a trace over ``TRACE_MAX_SPANS`` a
413, a missing or bad token a 401: each with a ``google.rpc.Status`` body
whose message names what was wrong, as OTLP/HTTP specifies; nothing of the
request is kept then. What is kept becomes runs in ``grading.otlp_assemble``.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from rest_framework import exceptions

from grading.otlp_decode import JSON, PROTOBUF, BodyRefused, decode, media_type, received_spans
from grading.otlp_ingest import TraceTooLarge, ingest
from singularity.auth import ApiTokenAuthentication

logger = logging.getLogger("grading.otlp")

_CODES = {400: code_pb2.INVALID_ARGUMENT, 401: code_pb2.UNAUTHENTICATED, 405: code_pb2.UNIMPLEMENTED}
_CODES |= {413: code_pb2.RESOURCE_EXHAUSTED, 415: code_pb2.INVALID_ARGUMENT}


def _encoded(message: object, as_json: bool, status: int) -> HttpResponse:
    if as_json:
        body = json_format.MessageToJson(message, indent=None).encode()  # type: ignore[arg-type]
        return HttpResponse(body, status=status, content_type=JSON)
    return HttpResponse(message.SerializeToString(), status=status, content_type=PROTOBUF)  # type: ignore[attr-defined]


def refusal(status: int, message: str, *, as_json: bool) -> HttpResponse:
    """An OTLP error answer: ``status`` with a ``google.rpc.Status`` naming what was wrong."""
    response = _encoded(status_pb2.Status(code=_CODES.get(status, code_pb2.UNKNOWN), message=message), as_json, status)
    if status == 401:
        response["WWW-Authenticate"] = "Bearer"
    if status == 405:
        response["Allow"] = "POST"
    return response


def _authenticate(request: HttpRequest) -> tuple[object | None, str]:
    """Return the token's user, or None and why not."""
    try:
        found = ApiTokenAuthentication().authenticate(request)
    except exceptions.AuthenticationFailed as exc:
        return None, str(exc.detail)
    if found is None:
        return (
            None,
            "Authorization: send 'Bearer <API token>' (OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>)",
        )
    return found[0], ""


@csrf_exempt
def export_traces(request: HttpRequest) -> HttpResponse:
    """Receive one OTLP export request (see the module) and answer as OTLP/HTTP says."""
    as_json = media_type(request.content_type or request.META.get("CONTENT_TYPE", "")) == JSON
    if request.method != "POST":
        return refusal(405, f"{request.method}: only POST is accepted here", as_json=as_json)
    user, why = _authenticate(request)
    if user is None:
        return refusal(401, why, as_json=as_json)
    limit = int(settings.OTLP_MAX_BODY_BYTES)
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit():
        return refusal(400, f"Content-Length: {declared[:40]!r} is not a number of bytes", as_json=as_json)
    if int(declared) > limit:
        return refusal(
            413,
            f"body: {int(declared):,} bytes, over the limit of {limit:,} bytes (OTLP_MAX_BODY_BYTES)",
            as_json=as_json,
        )
    try:
        body = request.body
    except RequestDataTooBig:
        return refusal(413, f"body: over the limit of {limit:,} bytes (OTLP_MAX_BODY_BYTES)", as_json=as_json)
    try:
        export = decode(body, request.META.get("CONTENT_TYPE", ""), request.META.get("HTTP_CONTENT_ENCODING", ""))
    except BodyRefused as exc:
        return refusal(exc.status, str(exc), as_json=as_json)
    received, rejected = received_spans(export)
    try:
        outcome = ingest(received, rejected, user=user)
    except TraceTooLarge as exc:
        return refusal(413, str(exc), as_json=as_json)
    answer = ExportTraceServiceResponse()
    if outcome.rejected:
        answer.partial_success.rejected_spans = outcome.rejected
        answer.partial_success.error_message = outcome.error_message
        logger.info(
            "OTLP export: %d spans kept, %d refused: %s", outcome.accepted, outcome.rejected, outcome.error_message
        )
    return _encoded(answer, as_json, 200)
