"""Who may run a being right now: a lease on the row, taken and renewed by conditional UPDATEs."""

from __future__ import annotations

import os
import secrets
import socket
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from singularity.errors import StateError
from singularity.models import Being


class LeaseLost(StateError):
    """This process no longer holds the being's lease: another runs it now, and nothing was written."""

    def __init__(self, being: Being, message: str | None = None) -> None:
        super().__init__(message or f"being {being.name}: lease lost to another process; nothing saved")


def stop_requested(being: Being) -> bool:
    """True when a stop was asked for (the page, the API, the admin) since the being started."""
    return Being.objects.filter(pk=being.pk, status=Being.Status.STOPPING).exists()


def owner_id(kind: str) -> str:
    """A fresh owner name: ``<kind>:<host>:<pid>:<nonce>``, unique even between threads of one process."""
    return f"{kind}:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _holder_is_dead(owner: str) -> bool:
    """True when the lease holder was a process on this host that no longer exists."""
    parts = owner.split(":")
    if len(parts) != 4 or parts[1] != socket.gethostname() or not parts[2].isdigit():
        return False
    if int(parts[2]) == os.getpid():
        return False
    try:
        os.kill(int(parts[2]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def is_live(being: Being) -> bool:
    """True while a living process holds an unexpired lease on ``being`` (as last read)."""
    if not being.lease_owner or being.lease_until is None or being.lease_until <= timezone.now():
        return False
    return not _holder_is_dead(being.lease_owner)


def acquire(being: Being, owner: str, *, extra: Q | None = None) -> bool:
    """Take the lease if it is free, expired, ours, or held by a dead local process. Returns whether we hold it."""
    now = timezone.now()
    free = Q(lease_owner="") | Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner=owner)
    if being.lease_owner and being.lease_owner != owner and _holder_is_dead(being.lease_owner):
        free |= Q(lease_owner=being.lease_owner)
    query = Being.objects.filter(free, pk=being.pk)
    if extra is not None:
        query = query.filter(extra)
    until = now + timedelta(seconds=settings.SINGULARITY_LEASE_SECS)
    if query.update(lease_owner=owner, lease_until=until) != 1:
        return False
    being.lease_owner, being.lease_until = owner, until
    return True


def release(being: Being, owner: str) -> None:
    Being.objects.filter(pk=being.pk, lease_owner=owner).update(lease_owner="", lease_until=None)
    being.lease_owner, being.lease_until = "", None
