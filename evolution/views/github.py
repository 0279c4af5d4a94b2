"""GitHub's webhook receiver, /github/webhook/ (``evolution.forges.github_webhook`` does the work)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from evolution.forges import github_webhook

#: GitHub caps a delivery at 25 MB; a pull_request event is a few kilobytes.
MAX_BODY = 5 * 1024 * 1024


@csrf_exempt
@require_POST
def github_webhook_view(request: HttpRequest) -> HttpResponse:
    """Verify and record one delivery; a pull request event wakes its wait (401 unsigned, 200 otherwise)."""
    if int(request.headers.get("Content-Length") or 0) > MAX_BODY:
        return HttpResponse("the delivery is larger than this receiver reads", status=413, content_type="text/plain")
    answer = github_webhook.receive(request.headers, request.body)
    return HttpResponse(answer.text, status=answer.status, content_type="text/plain")
