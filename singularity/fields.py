"""A money column that is exact on every database.

Postgres stores ``numeric(30, 12)``. SQLite has no exact decimal type (its
NUMERIC affinity keeps 15 significant digits), so there the column is an
integer count of ``QUANTUM`` units: comparisons and SUM stay exact and
ordered. The SQLite range is ±9,223,372 USD; a value outside it is refused.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import connection, models

from singularity.money import DECIMAL_PLACES, EXACT, MoneyError, quantize

_INT64_MAX = 2**63 - 1
_SCALE = Decimal(10) ** DECIMAL_PLACES
#: The largest amount each backend's money column holds exactly.
MOST = {
    "sqlite": Decimal(_INT64_MAX) / _SCALE,
    "postgresql": EXACT.subtract(Decimal(10) ** (30 - DECIMAL_PLACES), Decimal(1) / _SCALE),
}


def check_storable(amount: Decimal, *, what: str, vendor: str | None = None) -> None:
    """Raise MoneyError naming ``what`` unless a money column of this database holds ``amount`` exactly.

    Check input with it before any arithmetic: quantizing 1e100 raises, and a
    row past the column's range fails only when it is saved.
    """
    most = MOST.get(vendor or connection.vendor, MOST["postgresql"])
    if not amount.is_finite() or amount.copy_abs() > most:  # copy_abs: abs() rounds to the context
        raise MoneyError(f"{what}: {amount} is over {most}, the most this database's money column holds")


class MoneyField(models.DecimalField):
    description = "An exact amount of money in USD"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["max_digits"] = 30
        kwargs["decimal_places"] = DECIMAL_PLACES
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        kwargs.pop("max_digits", None)
        kwargs.pop("decimal_places", None)
        return name, path, args, kwargs

    def get_internal_type(self) -> str:
        # Keeps Django's float-based SQLite decimal converter away from our integers.
        return "MoneyField"

    def db_type(self, connection: Any) -> str:
        if connection.vendor == "sqlite":
            return "integer"
        return f"numeric({self.max_digits}, {self.decimal_places})"

    def rel_db_type(self, connection: Any) -> str:
        return self.db_type(connection)

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if value is None:
            return None
        if type(value) is not Decimal or not value.is_finite():  # a finite Decimal needs no more checking
            if hasattr(value, "as_sql"):
                return value
            value = self.to_python(value)
        amount = quantize(value)
        if connection.vendor == "sqlite":
            units = int(amount * _SCALE)
            if abs(units) > _INT64_MAX:
                raise MoneyError(f"{self.name}: {amount} is outside the range SQLite can hold exactly")
            return units
        return amount

    def get_db_prep_save(self, value: Any, connection: Any) -> Any:
        return self.get_db_prep_value(value, connection, prepared=False)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Decimal | None:
        if value is None:
            return None
        if connection.vendor == "sqlite":
            if isinstance(value, float):
                # An aggregate over integers can come back as a float only past int64;
                # refuse rather than return an inexact amount.
                raise MoneyError(f"{self.name}: inexact value {value!r} read from SQLite")
            return Decimal(int(value)) / _SCALE
        return quantize(Decimal(value))

    def get_db_converters(self, connection: Any) -> list[Any]:
        return [self.from_db_value]
