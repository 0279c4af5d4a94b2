"""The brain's ``notify:`` block in MANIFEST.yaml: destinations and alert rules, read strictly.

```yaml
notify:
  destinations:
    ops:                        # the destination's name
      kind: slack               # slack | webhook
      urlEnv: SLACK_OPS_URL     # or url: https://… (a Slack address is a secret: name its variable)
      events: [card.waiting, watch.settled]   # optional; every event when left out
    ci:
      kind: webhook
      url: https://ci.example.org/hooks/singularity
      secretEnv: CI_HOOK_SECRET # the shared secret's variable; a secret is never written in the brain
  alerts:
    triage-accuracy:
      kind: objective           # objective | spend | failing | backlog
      entity: scenario:triage   # objective, failing (spend: optional)
      metric: accuracy          # objective
      runs: 20                  # objective, failing: the recent graded runs read
      warning: 0.9
      alert: 0.8
```

Every refusal is a line "constitution/MANIFEST.yaml: notify.<dotted key>: <why>". ``sync`` writes the rows the
block declares (``source`` manifest) and switches off the manifest's rows it no longer declares.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction

from singularity.notify.events import EVENTS, forget
from singularity.notify.models import AlertRule, Destination

LABEL = "constitution/MANIFEST.yaml"
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,79}$")
ENV = re.compile(r"^[A-Z_][A-Z0-9_]{0,99}$")
DESTINATION_KEYS = {"kind", "url", "urlEnv", "secretEnv", "events"}
ALERT_KEYS = {"kind", "entity", "metric", "queue", "runs", "warning", "alert"}
SECRET_WORDS = ("secret", "token", "password")


def _fail(errors: list[str], key: str, why: str) -> None:
    errors.append(f"{LABEL}: notify.{key}: {why}")


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _destination(name: str, block: Any, errors: list[str]) -> dict[str, Any] | None:
    where = f"destinations.{name}"
    if not isinstance(block, dict):
        _fail(errors, where, "must be a mapping (kind, url or urlEnv, secretEnv, events)")
        return None
    before = len(errors)
    for key in sorted(set(block) - DESTINATION_KEYS):
        why = "a secret is never written in the brain: name its environment variable with secretEnv"
        _fail(
            errors,
            f"{where}.{key}",
            why if key.lower() in SECRET_WORDS else f"unknown key (one of {', '.join(sorted(DESTINATION_KEYS))})",
        )
    kind = block.get("kind")
    if kind not in Destination.Kind.values:
        _fail(errors, f"{where}.kind", f"must be one of {' | '.join(Destination.Kind.values)}, not {kind!r}")
    url, url_env = block.get("url", ""), block.get("urlEnv", "")
    if url and (not isinstance(url, str) or not url.startswith(("https://", "http://"))):
        _fail(errors, f"{where}.url", f"must be an http(s) address, not {url!r}")
    if bool(url) == bool(url_env):
        _fail(errors, where, "needs exactly one of url and urlEnv")
    if kind == Destination.Kind.SLACK and url:
        _fail(errors, f"{where}.url", "a Slack webhook address is a secret: name its environment variable with urlEnv")
    for key in ("urlEnv", "secretEnv"):
        value = block.get(key, "")
        if value and (not isinstance(value, str) or not ENV.match(value)):
            _fail(errors, f"{where}.{key}", f"must be an environment variable's name (A-Z, 0-9, _), not {value!r}")
    events = block.get("events", [])
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        _fail(errors, f"{where}.events", "must be a list of event names")
    else:
        for event in events:
            if event not in EVENTS:
                _fail(errors, f"{where}.events", f"{event!r} is not an event (one of {', '.join(EVENTS)})")
    if len(errors) > before:
        return None
    return {
        "kind": kind,
        "url": url or "",
        "url_env": url_env or "",
        "secret_env": block.get("secretEnv", "") or "",
        "events": list(events),
    }


def _alert(name: str, block: Any, errors: list[str]) -> dict[str, Any] | None:
    where = f"alerts.{name}"
    if not isinstance(block, dict):
        _fail(errors, where, "must be a mapping (kind, warning, alert, …)")
        return None
    before = len(errors)
    for key in sorted(set(block) - ALERT_KEYS):
        _fail(errors, f"{where}.{key}", f"unknown key (one of {', '.join(sorted(ALERT_KEYS))})")
    kind = block.get("kind")
    if kind not in AlertRule.Kind.values:
        _fail(errors, f"{where}.kind", f"must be one of {' | '.join(AlertRule.Kind.values)}, not {kind!r}")
    needs = {"objective": ("entity", "metric"), "failing": ("entity",)}.get(str(kind), ())
    for key in needs:
        if not isinstance(block.get(key), str) or not block.get(key):
            _fail(errors, f"{where}.{key}", f"a {kind} rule names its {key}")
    entity = block.get("entity", "")
    if entity and (not isinstance(entity, str) or ":" not in entity):
        _fail(errors, f"{where}.entity", f'must be "<kind>:<slug>" (e.g. scenario:triage), not {entity!r}')
    runs = block.get("runs", 20)
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= 1000:
        _fail(errors, f"{where}.runs", f"must be a whole number from 1 to 1000, not {runs!r}")
    levels = {}
    for key in ("warning", "alert"):
        levels[key] = _decimal(block.get(key))
        if levels[key] is None:
            _fail(errors, f"{where}.{key}", f"must be a number, not {block.get(key)!r}")
    if levels["warning"] is not None and levels["alert"] is not None:
        below = kind == AlertRule.Kind.OBJECTIVE
        if (levels["alert"] > levels["warning"]) if below else (levels["alert"] < levels["warning"]):
            side = "at or under" if below else "at or over"
            _fail(errors, f"{where}.alert", f"must be {side} warning ({levels['warning']}): it is the worse level")
    if len(errors) > before:
        return None
    return {
        "kind": kind,
        "entity": entity or "",
        "metric": block.get("metric", "") or "",
        "queue": block.get("queue", "") or "",
        "runs": runs,
        "warning": levels["warning"],
        "alert": levels["alert"],
    }


def _named(errors: list[str], where: str, block: Any) -> dict[str, Any]:
    if block is None:
        return {}
    if not isinstance(block, dict):
        _fail(errors, where, "must be a mapping of names")
        return {}
    for name in block:
        if not isinstance(name, str) or not NAME.match(name):
            _fail(errors, f"{where}.{name}", "a name is lowercase letters, digits, - and _ (at most 80)")
    return {n: b for n, b in block.items() if isinstance(n, str) and NAME.match(n)}


def read(manifest: dict[str, Any] | None) -> tuple[dict[str, dict], dict[str, dict], list[str]]:
    """(destinations, alert rules, refusals) of the manifest's ``notify:`` block (all empty when it has none)."""
    errors: list[str] = []
    block = (manifest or {}).get("notify")
    if block is None:
        return {}, {}, []
    if not isinstance(block, dict):
        return {}, {}, [f"{LABEL}: notify: must be a mapping (destinations, alerts)"]
    for key in sorted(set(block) - {"destinations", "alerts"}):
        _fail(errors, str(key), "unknown key (one of alerts, destinations)")
    destinations = {
        name: found
        for name, body in _named(errors, "destinations", block.get("destinations")).items()
        if (found := _destination(name, body, errors)) is not None
    }
    alerts = {
        name: found
        for name, body in _named(errors, "alerts", block.get("alerts")).items()
        if (found := _alert(name, body, errors)) is not None
    }
    return destinations, alerts, errors


def refusals(manifest: dict[str, Any] | None) -> list[str]:
    """Every refusal of the ``notify:`` block, as MANIFEST refusals are written ([] when it reads)."""
    return read(manifest)[2]


def sync(manifest: dict[str, Any] | None, brain_errors: list[str] = ()) -> None:
    """Write the block's destinations and rules; switch off the ones it dropped.

    While the manifest is refused (``brain_errors`` name it) nothing changes: a broken MANIFEST.yaml must not
    silence the destinations it declared.
    """
    destinations, alerts, errors = read(manifest)
    if errors or any(e.startswith(LABEL) for e in brain_errors):
        return
    source = Destination.Source.MANIFEST
    with transaction.atomic():
        for name, values in destinations.items():
            Destination.objects.update_or_create(name=name, defaults={**values, "source": source, "active": True})
        Destination.objects.filter(source=source).exclude(name__in=destinations).update(active=False)
        for name, values in alerts.items():
            AlertRule.objects.update_or_create(name=name, defaults={**values, "source": source, "active": True})
        AlertRule.objects.filter(source=source).exclude(name__in=alerts).update(active=False)
    forget()  # ``update`` sends no post_save
