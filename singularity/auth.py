"""API token authentication: ``Authorization: Bearer <key>`` (or ``Token <key>``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions

from singularity.models import ApiToken

#: A token's ``last_used_at`` is noted to the minute.
LAST_USE_PRECISION = timedelta(minutes=1)


def authorization_words(request: Any) -> list[str]:
    """The ``Authorization`` header split into words; AuthenticationFailed when it is not ASCII text.

    A key is ASCII (``ApiToken.issue`` makes URL-safe ones), and so is every
    scheme; WSGI hands a header over as Latin-1 text, so a byte past ASCII is a
    header no token can match, refused 401 rather than failing to decode.
    """
    raw = request.META.get("HTTP_AUTHORIZATION", "")
    if not isinstance(raw, str):
        raw = raw.decode("latin-1")
    if not raw.isascii():
        raise exceptions.AuthenticationFailed("Authorization header: not ASCII text; an API key is ASCII.")
    return raw.split()


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keywords = ("bearer", "token")

    def authenticate(self, request: Any) -> tuple[Any, ApiToken] | None:
        header = authorization_words(request)
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header: expected '<Bearer|Token> <key>'.")
        key = header[1]
        token = (
            ApiToken.objects.select_related("user")
            .filter(key_hash=ApiToken.hash_key(key), revoked_at__isnull=True)
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at >= LAST_USE_PRECISION:
            # At most once a minute a token: a write committed on every call, to one row every caller of the token
            # shares, was most of a small request's time (an exporter sends several a second).
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request: Any) -> str:
        return "Bearer"


def is_agent(request: Any) -> bool:
    """True when the request is made with an agent token: such a caller is never a person."""
    auth = getattr(request, "auth", None)
    return isinstance(auth, ApiToken) and auth.is_agent
