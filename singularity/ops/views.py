"""The probes' and the scrape's views: /healthz, /readyz, /metrics. No login; /metrics has its own guard."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST

from singularity.ops import health, metrics


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """The process answers: touches nothing else."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    """200 when every part the work needs holds, else 503; the parts by name either way."""
    ready, parts = health.readiness()
    failing = [name for name, part in parts.items() if not part["ok"]]
    body = {"status": "ready" if ready else "not ready", "failing": failing, "checks": parts}
    return JsonResponse(body, status=200 if ready else 503)


@never_cache
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus' text format, for the bearer of METRICS_TOKEN or an address in METRICS_ALLOW; 403 otherwise."""
    if not metrics.allowed(request.headers, request.META.get("REMOTE_ADDR", "")):
        return HttpResponse(
            "metrics: send Authorization: Bearer <METRICS_TOKEN>, or scrape from an address in METRICS_ALLOW\n",
            status=403,
            content_type="text/plain",
        )
    return HttpResponse(metrics.render(), content_type=CONTENT_TYPE_LATEST)
