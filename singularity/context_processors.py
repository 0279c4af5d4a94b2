from typing import Any

from django.conf import settings


def navigation(request: Any) -> dict[str, Any]:
    """Values every page's navigation needs."""
    return {"demo_gateway": not settings.BRAMA_BASE_URL or settings.BRAMA_MODEL.startswith("demo")}
