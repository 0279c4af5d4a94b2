"""Instants read from Postgres, parsed by psycopg's C loader.

Django's psycopg 3 backend reads every ``timestamptz`` through a loader of its own, a subclass of psycopg's
pure-Python ``TimestamptzLoader`` that relabels the parsed instant with the connection's time zone. psycopg
swaps its own loaders for their C twins, but not a subclass: so every instant a page reads is parsed by a
regular expression in Python, about 5 µs each (the fleet's page reads some 1,500). ``CTzLoader`` gives the
same value — the C loader's parse, relabelled with the same zone as Django's — at about a third of the cost.

It is registered on each new connection (``register``, from ``connection_created``) with the zone Django
would use; Django's own check on every cursor (``loader.timezone`` against the connection's) then finds it
right and leaves it. Without psycopg's C part (``psycopg[binary]``) nothing is registered.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.signals import connection_created

try:
    from psycopg import adapt
    from psycopg_binary import _psycopg
except ImportError:  # psycopg 2, or psycopg 3 without its C part: Django's loader stands
    _psycopg = None


def _loader(zone: Any) -> type[Any]:
    """A timestamptz loader that parses in C and relabels with ``zone``, as Django's does in Python."""

    class CTzLoader(adapt.Loader):
        timezone = zone  # what Django's cursor() compares with the connection's zone

        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self._parse = _psycopg.TimestamptzLoader(oid, context).load

        def load(self, data: Any) -> Any:
            return self._parse(data).replace(tzinfo=self.timezone)

    return CTzLoader


_LOADERS: dict[Any, type[Any]] = {}


def register(sender: Any, connection: Any, **kwargs: Any) -> None:
    """On a new Postgres connection of psycopg 3 with its C part, read instants with ``CTzLoader``."""
    if _psycopg is None or connection.vendor != "postgresql" or not hasattr(connection.connection, "adapters"):
        return
    zone = connection.timezone
    loader = _LOADERS.get(zone)
    if loader is None:
        loader = _LOADERS[zone] = _loader(zone)
    connection.connection.adapters.register_loader("timestamptz", loader)


def connect() -> None:
    """Register ``register`` for every new database connection (the app's ``ready``)."""
    connection_created.connect(register, dispatch_uid="singularity.pgtime")
