"""Heartbeats of the background processes: each worker says which queues it serves, beat says it ticked.

A worker writes ``worker:<queue>:<hostname>`` every ``EVERY_SECS`` while it
runs; beat writes ``beat`` at each tick of its scheduler (at most every
``EVERY_SECS``). The readiness probe reads them back: a queue with no fresh
worker pulse has no worker alive, a stale beat pulse means beat stopped
ticking. Stored where every host sees them: in Redis when the broker is
Redis (keys that expire), in files under ``var/pulse`` for the embedded
broker (one host).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

EVERY_SECS = 10.0
#: A pulse older than this is stale: the process is taken for dead.
STALE_SECS = 60.0
_PREFIX = "singularity:pulse:"


def _broker_url() -> str:
    from django.conf import settings

    return str(settings.CELERY_BROKER_URL)


def _folder() -> Path:
    from django.conf import settings

    folder = Path(settings.VAR_DIR) / "pulse"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _redis() -> Any | None:
    url = _broker_url()
    if not url.startswith(("redis://", "rediss://")):
        return None
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)


def beat(name: str, now: float | None = None) -> None:
    """Record that ``name`` is alive now."""
    now = time.time() if now is None else now
    client = _redis()
    if client is not None:
        client.set(_PREFIX + name, repr(now), ex=int(STALE_SECS * 10))
        return
    path = _folder() / name.replace("/", "_")
    path.write_text(repr(now))


def last(prefix: str) -> dict[str, float]:
    """Every pulse whose name starts with ``prefix`` → when it was last written (epoch seconds)."""
    client = _redis()
    found: dict[str, float] = {}
    if client is not None:
        for key in client.scan_iter(match=_PREFIX + prefix + "*", count=500):
            value = client.get(key)
            if value is not None:
                found[key.decode()[len(_PREFIX) :]] = float(value)
        return found
    for path in _folder().glob(prefix.replace("/", "_") + "*"):
        try:
            found[path.name] = float(path.read_text())
        except (OSError, ValueError):
            continue  # a pulse being written: the next read sees it
    return found


def alive_queues(now: float | None = None, stale: float = STALE_SECS) -> dict[str, list[str]]:
    """Queue → the worker hostnames whose pulse on it is fresh."""
    now = time.time() if now is None else now
    alive: dict[str, list[str]] = {}
    for name, at in last("worker:").items():
        _, queue, hostname = name.split(":", 2)
        if now - at <= stale:
            alive.setdefault(queue, []).append(hostname)
    return alive


def beat_age(now: float | None = None) -> float | None:
    """Seconds since beat last ticked, or None when it never did."""
    now = time.time() if now is None else now
    at = last("beat").get("beat")
    return None if at is None else max(0.0, now - at)


def start_worker_pulse(hostname: str, queues: list[str]) -> threading.Thread:
    """Write this worker's pulse for each of ``queues`` now and every EVERY_SECS, on a daemon thread."""

    def loop() -> None:
        while True:
            for queue in queues:
                try:
                    beat(f"worker:{queue}:{hostname}")
                except Exception as exc:  # noqa: BLE001 - a missed pulse is retried; the worker carries on
                    log.warning("pulse of %s on %s not written: %s", hostname, queue, exc)
            time.sleep(EVERY_SECS)

    thread = threading.Thread(target=loop, name="singularity-pulse", daemon=True)
    thread.start()
    return thread


class _Throttle:
    def __init__(self) -> None:
        self.at = 0.0


_beat_throttle = _Throttle()


def beat_ticked() -> None:
    """Called from beat's scheduler on every tick: write the ``beat`` pulse, at most every EVERY_SECS."""
    now = time.time()
    if now - _beat_throttle.at < EVERY_SECS:
        return
    try:
        beat("beat", now)
        _beat_throttle.at = now
    except Exception as exc:  # noqa: BLE001 - beat keeps scheduling whatever the pulse store says
        log.warning("beat's pulse not written: %s", exc)
