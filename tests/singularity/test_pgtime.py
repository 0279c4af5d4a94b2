"""Instants read from Postgres through psycopg's C parse (``singularity.pgtime``) are the values Django's own
loader gives: the same instant, relabelled with the same zone, whatever the session's offset or precision."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection
from django.db.backends.postgresql.psycopg_any import BaseTzLoader

from singularity import pgtime

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the loader is Postgres's"),
]

TEXTS = [
    "2026-12-02 04:06:37.123456+00",
    "2026-12-02 04:06:37+00",
    "1999-12-31 23:59:59.999999+00",
    "2026-03-29 01:30:00+00",
    "0044-03-15 12:00:00+00",
    "9999-12-30 23:59:59.999999+00",
]


def read(texts, zone="UTC"):
    """``texts`` as timestamptz, read with the session's time zone ``zone``, through the connection's loader."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET TIME ZONE '{zone}'")
        try:
            cursor.execute("SELECT t::timestamptz FROM unnest(%s::text[]) AS t", [texts])
            return [row[0] for row in cursor.fetchall()]
        finally:
            cursor.execute("SET TIME ZONE 'UTC'")


def test_the_connection_reads_instants_with_the_c_loader_of_djangos_zone():
    connection.ensure_connection()
    loader = connection.connection.adapters.get_loader(1184, 0)  # timestamptz, text
    assert loader.__name__ == "CTzLoader"
    assert loader.timezone == connection.timezone
    with connection.cursor():  # Django's cursor finds the zone right and leaves the loader as it is
        assert connection.connection.adapters.get_loader(1184, 0) is loader


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/St_Johns"])
def test_the_values_are_djangos_loaders_whatever_the_sessions_zone(zone):
    ours = read(TEXTS, zone)

    class Djangos(BaseTzLoader):
        timezone = connection.timezone

    connection.connection.adapters.register_loader("timestamptz", Djangos)
    try:
        theirs = read(TEXTS, zone)
    finally:
        pgtime.register(None, connection)
    assert ours == theirs
    assert [value.tzinfo for value in ours] == [value.tzinfo for value in theirs]
    assert all(value.tzinfo is connection.timezone for value in ours)
    if zone == "UTC":
        assert ours[0] == datetime(2026, 12, 2, 4, 6, 37, 123456, tzinfo=UTC)


def test_a_model_row_reads_the_instant_it_wrote():
    from grading.models import Entity

    at = datetime(2026, 12, 2, 4, 6, 37, 654321, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    entity = Entity.objects.create(slug="pgtime", target_kind="scenario", kind="workflow", path="x.yaml")
    Entity.objects.filter(pk=entity.pk).update(created_at=at)
    read_back = Entity.objects.values_list("created_at", flat=True).get(pk=entity.pk)
    assert read_back == at
    assert read_back.tzinfo is connection.timezone
