"""Written-out reads: a statement whose text is fixed, its values passed through each field's own conversion.

The hot reads of the loop and the fleet (a batch of landings, every live cycle of the fleet's page) are written
out rather than built by the ORM: building their statements and their model rows cost more than running them.
What the ORM would still have done for them is converting each value the database hands back (SQLite's
instants arrive as text, a JSON column as text everywhere): ``Columns`` does that, for the columns that need it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Field, Model


@dataclass(frozen=True)
class Columns:
    """The select list of a written-out statement (``sql``) and how to convert what it reads (``convert``)."""

    sql: str
    #: (the value's place in a row, its column, the conversions it goes through): only the columns that have one.
    steps: tuple[tuple[int, Any, tuple[Any, ...]], ...]

    def convert(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """``rows`` as the ORM would have handed their values: each row a tuple, converted where a column asks."""
        if not self.steps:
            return rows
        converted = []
        for row in rows:
            values = list(row)
            for index, column, steps in self.steps:
                for step in steps:
                    values[index] = step(values[index], column, connection)
            converted.append(tuple(values))
        return converted


def columns(
    fields: list[tuple[str, type[Model], str]], *, extra: tuple[str, ...] = (), instead: dict[str, str] | None = None
) -> Columns:
    """The select list of ``fields``, each (a table's alias in the statement, its model, a field's name), then
    ``extra`` (expressions read as the database gives them), with the conversions of the fields that need one.

    ``instead`` reads an expression in a field's place (by the field's name), as the database gives it: what a
    reader asks of a column without reading it whole (whether a JSON document is empty, say)."""
    quote = connection.ops.quote_name
    parts, steps = [], []
    for index, (alias, model, name) in enumerate(fields):
        if instead and name in instead:
            parts.append(instead[name])
            continue
        field: Field[Any, Any] = model._meta.get_field(name)  # type: ignore[assignment]
        parts.append(f"{alias}.{quote(field.column)}")
        column = field.get_col(model._meta.db_table)
        convert = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        if convert:
            steps.append((index, column, tuple(convert)))
    return Columns(", ".join([*parts, *extra]), tuple(steps))
