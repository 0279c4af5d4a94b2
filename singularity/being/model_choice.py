"""A model choice that cannot work is refused: the name must be one the gateway says it serves (issue 34)."""

from __future__ import annotations

import json
import logging
from typing import Any

from singularity.errors import UpstreamError

log = logging.getLogger(__name__)

SWITCH_MODEL = "self__switch_model"


def unserved(gateway: Any, model: str) -> str:
    """Why ``model`` cannot be used with ``gateway``, or "" when it can (or the gateway does not say).

    Asks the gateway's model list (``served_models``, cached by the gateway).
    A gateway that cannot list its models, or lists none, refuses nothing.
    """
    served_models = getattr(gateway, "served_models", None)
    if served_models is None:
        return ""
    try:
        served = served_models()
    except UpstreamError as exc:
        log.warning("cannot read the gateway's model list; %r is not checked: %s", model, exc)
        return ""
    if not served or model in served:
        return ""
    return f"model {model!r} is not served by the gateway; it serves: {', '.join(sorted(served))}"


def switch_refusal(gateway: Any, arguments: str | dict[str, Any]) -> str:
    """Why a ``self__switch_model`` call with ``arguments`` is refused, or "" to let the tool run."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return ""  # the catalogue refuses it, naming the problem
    model = arguments.get("model") if isinstance(arguments, dict) else None
    if not isinstance(model, str) or not model.strip():
        return ""
    return unserved(gateway, model.strip())
