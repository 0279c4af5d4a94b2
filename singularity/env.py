"""Strict readers for settings that come from the environment.

Every reader names the variable in its error, so a bad value fails at boot
with a message that says which knob to fix.
"""

from __future__ import annotations

import os
from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str, environ: dict[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    value = env.get(name)
    return None if value is None else value.strip()


def env_str(name: str, default: str = "", environ: dict[str, str] | None = None) -> str:
    value = _raw(name, environ)
    return default if value is None or value == "" else value


def env_secret(name: str, default: str = "", environ: dict[str, str] | None = None) -> str:
    """Read NAME, or the contents of the file named by NAME_FILE."""
    file_name = _raw(f"{name}_FILE", environ)
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE: cannot read {file_name!r}: {exc.strerror}") from exc
    return env_str(name, default, environ)


def env_bool(name: str, default: bool = False, environ: dict[str, str] | None = None) -> bool:
    value = _raw(name, environ)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}: expected a boolean (true/false, 1/0, yes/no), got {value!r}")


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: dict[str, str] | None = None,
) -> int:
    value = _raw(name, environ)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected a whole number, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}: must be at least {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}: must be at most {maximum}, got {number}")
    return number


def env_decimal(
    name: str,
    default: str,
    *,
    minimum: Decimal | None = Decimal(0),
    environ: dict[str, str] | None = None,
) -> Decimal:
    """A decimal amount; refuses floats written oddly, NaN, infinity and (by default) negatives."""
    value = _raw(name, environ)
    text = default if value is None or value == "" else value
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise ImproperlyConfigured(f"{name}: expected a decimal number, got {text!r}") from None
    if not number.is_finite():
        raise ImproperlyConfigured(f"{name}: expected a finite decimal number, got {text!r}")
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}: must not be below {minimum}, got {text}")
    return number


def env_float(
    name: str, default: float, *, minimum: float | None = 0.0, environ: dict[str, str] | None = None
) -> float:
    value = _raw(name, environ)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected a number, got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ImproperlyConfigured(f"{name}: expected a finite number, got {value!r}")
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}: must not be below {minimum}, got {value}")
    return number
