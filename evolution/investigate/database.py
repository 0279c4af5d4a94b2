"""db_schema and db_query: SQL over the read-only views of evolution's migration 0017, and nothing else.

Reading only those views holds by construction, not by inspecting the SQL:

- Postgres: the query runs on a connection of its own, logged in as ``LOOP_READ_DB_USER`` — a role that can
  SELECT the ``ro_*`` views and nothing else (so ``SET ROLE`` back is impossible: the session is that role) —
  in a READ ONLY transaction, under ``statement_timeout``, sent by the extended protocol (one statement);
- SQLite: a connection opened ``mode=ro`` with ``PRAGMA query_only``, whose authorizer allows SELECT, the
  columns the views read (recorded from the views themselves) and functions, and denies everything else
  (ATTACH, PRAGMA, any write, any other column); a progress handler stops it at the deadline; sqlite3 runs one
  statement a call.

The statement is also read first (one statement, a SELECT) so the model hears a plain refusal.
"""

from __future__ import annotations

import datetime
import logging
import sqlite3
import time
import uuid
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import sqlparse
from django.conf import settings
from django.db import connection

log = logging.getLogger(__name__)

#: The views the proposer may query, with what each holds (``views_sql`` makes them after every migrate).
VIEWS: dict[str, str] = {
    "ro_runs": "the entities' runs (executions): input, output, error, trace (tool calls), cost, status, times",
    "ro_grades": "each graded run's grade: score, passed, failure category, per-criterion verdicts, metrics",
    "ro_spans": "each run's span tree (its model and tool calls, nested), by run_id",
    "ro_ratings": "people's ratings of runs, per metric (who rated is not shown)",
    "ro_episodes": "chat episodes (a run each): role, surface, status, when opened and closed, how",
    "ro_turns": "the messages of chat episodes in order, with tool calls (by run_id)",
    "ro_cycles": "the loop's cycles: entity, origin, phase, status, reason, window, spend, times",
    "ro_rounds": "the loop's rounds (proposals): summary, hypothesis, files, status, cost, the check's verdict",
    "ro_lessons": "lessons the loop kept: outcome, summary, hypothesis, per-metric movement",
    "ro_ideas": "ideas people posted for an entity and what became of them",
}

#: SQLite functions a query may never call (most are absent anyway; the list is what must stay so).
DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "sqlite_offset"})

#: The most characters of answer one query hands back (rows past it are cut and said so).
MAX_ANSWER_CHARS = 40_000


class QueryRefused(Exception):
    """The query is not one the proposer may run; the message says why (to the model)."""


def statement_problem(sql: Any) -> str | None:
    """Why ``sql`` is not one SELECT statement, or None."""
    if not isinstance(sql, str) or not sql.strip():
        return "sql: one SELECT statement over the ro_* views (db_schema lists them)"
    statements = [s for s in sqlparse.split(sql) if s.strip().strip(";").strip()]
    if len(statements) != 1:
        return f"one statement at a time ({len(statements)} given)"
    kind = sqlparse.parse(statements[0])[0].get_type()
    if kind != "SELECT":
        return f"only SELECT reads the views; {kind.lower() if kind != 'UNKNOWN' else 'this statement'} is refused"
    return None


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return f"<{len(bytes(value))} bytes>"
    return value


# --- SQLite ---------------------------------------------------------------------------------------


def _view_columns(conn: sqlite3.Connection) -> frozenset[tuple[str, str]]:
    """Every (table, column) the views read, recorded by preparing each view through an authorizer that watches."""
    seen: set[tuple[str, str]] = set()

    def watch(action: int, arg1: str | None, arg2: str | None, db: str | None, _source: str | None) -> int:
        if action == sqlite3.SQLITE_READ and db is not None and arg1 is not None:
            seen.add((arg1, arg2 or ""))
        return sqlite3.SQLITE_OK

    conn.set_authorizer(watch)
    try:
        for name in VIEWS:
            conn.execute(f"SELECT * FROM {name} LIMIT 0").fetchall()
    finally:
        conn.set_authorizer(None)
    return frozenset(seen)


def _sqlite_authorizer(allowed: frozenset[tuple[str, str]], real: frozenset[str]) -> Any:
    """The authorizer: SELECT, functions (but DENIED_FUNCTIONS), reads of a view's own columns; nothing else.

    A read is allowed by (table, column), never by the name of the view it is made for: a CTE may carry a
    view's name, so a column no view reads (a password, a token) stays out of reach under any name. A name
    that is no table of the database (``real``) is the query's own CTE, and is read.
    """
    tables = frozenset(table for table, _ in allowed)

    def authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None, _source: str | None) -> int:
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            table, column = arg1 or "", arg2 or ""
            if table in VIEWS or (table, column) in allowed or table.lower() not in real:
                return sqlite3.SQLITE_OK
            # No column read (count(*)): the table itself, allowed only among the views' own.
            return sqlite3.SQLITE_OK if column == "" and table in tables else sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION:
            return sqlite3.SQLITE_DENY if (arg2 or "").lower() in DENIED_FUNCTIONS else sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY

    return authorize


def _sqlite_connection() -> sqlite3.Connection:
    name = str(connection.settings_dict["NAME"])
    conn = sqlite3.connect(f"file:{quote(name)}?mode=ro", uri=True, timeout=5, check_same_thread=False)
    conn.execute("PRAGMA query_only = ON")
    real = frozenset(row[0].lower() for row in conn.execute("SELECT name FROM sqlite_master"))
    real |= {"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_sequence"}
    conn.set_authorizer(_sqlite_authorizer(_view_columns(conn), real))
    return conn


def _sqlite_rows(conn: sqlite3.Connection, sql: str, limit: int) -> tuple[list[str], list[tuple[Any, ...]]]:
    deadline = time.monotonic() + settings.LOOP_READ_STATEMENT_TIMEOUT_MS / 1000
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
    try:
        cursor = conn.execute(sql)
        rows = cursor.fetchmany(limit)
        columns = [d[0] for d in cursor.description or ()]
    except sqlite3.DatabaseError as exc:
        if "interrupted" in str(exc):
            raise QueryRefused(f"the query ran past {settings.LOOP_READ_STATEMENT_TIMEOUT_MS} ms") from exc
        if "not authorized" in str(exc) or "prohibited" in str(exc):
            raise QueryRefused(f"{exc}: only the ro_* views can be read (db_schema lists them)") from exc
        raise QueryRefused(f"the query failed: {exc}") from exc
    finally:
        conn.set_progress_handler(None, 0)
    return columns, rows


# --- Postgres -------------------------------------------------------------------------------------


def _postgres_connection() -> Any:
    """A connection logged in as the read-only role, with its configured password or else its derived one.

    A derived password the server turns down (SECRET_KEY changed since the last migrate, or another deployment on
    the cluster set its own) is given to the role again through the engine's connection, and the login tried once
    more (docs/decisions.md, issue 33: the read-only role's password).
    """
    import psycopg

    from evolution.investigate import views_sql

    db = connection.settings_dict

    def connect() -> Any:
        return psycopg.connect(
            host=db.get("HOST") or None,
            port=db.get("PORT") or None,
            dbname=db["NAME"],
            user=settings.LOOP_READ_DB_USER,
            password=settings.LOOP_READ_DB_PASSWORD or views_sql.role_password(),
            connect_timeout=5,
            options=f"-c statement_timeout={int(settings.LOOP_READ_STATEMENT_TIMEOUT_MS)} "
            "-c default_transaction_read_only=on",
            autocommit=True,
        )

    try:
        return connect()
    except psycopg.OperationalError as exc:
        if "password authentication failed" not in str(exc) or not views_sql.set_role_password():
            raise
    return connect()


def _postgres_rows(conn: Any, sql: str, limit: int) -> tuple[list[str], list[tuple[Any, ...]]]:
    import psycopg

    try:
        with conn.transaction(), conn.cursor() as cursor:
            cursor.execute("SET TRANSACTION READ ONLY")
            # binary=True sends the statement by the extended protocol: one statement, and no %-placeholders read.
            cursor.execute(sql, binary=True)
            rows = cursor.fetchmany(limit)
            columns = [d.name for d in cursor.description or ()]
    except psycopg.errors.InsufficientPrivilege as exc:
        raise QueryRefused(f"{exc.diag.message_primary}: only the ro_* views can be read (db_schema)") from exc
    except psycopg.errors.QueryCanceled as exc:
        raise QueryRefused(f"the query ran past {settings.LOOP_READ_STATEMENT_TIMEOUT_MS} ms") from exc
    except psycopg.Error as exc:
        message = exc.diag.message_primary or str(exc)
        raise QueryRefused(f"the query failed: {message}") from exc
    return columns, rows


# --- The reader -----------------------------------------------------------------------------------


class Reader:
    """One investigation's read-only connection, opened on its first query and closed by ``close``."""

    def __init__(self) -> None:
        self._conn: Any = None
        self.vendor = connection.vendor

    def _open(self) -> Any:
        """The read-only connection, opened on first use; the driver's own error when it cannot be."""
        if self._conn is None:
            if self.vendor == "sqlite":
                self._conn = _sqlite_connection()
            elif self.vendor == "postgresql":
                self._conn = _postgres_connection()
            else:
                raise QueryRefused(f"db_query does not read a {self.vendor} database")
        return self._conn

    def _connection(self) -> Any:
        if self._conn is None:
            try:
                self._open()
            except QueryRefused:
                raise
            except Exception as exc:  # noqa: BLE001 - the read connection failing is said to the model and logged
                log.warning("proposer reads: the read-only database connection failed: %s", exc)
                raise QueryRefused(
                    "the database cannot be read now (the engine's read-only connection failed); "
                    "go on with the brief and the files"
                ) from exc
        return self._conn

    def rows(self, sql: str, limit: int) -> tuple[list[str], list[tuple[Any, ...]]]:
        """The columns and at most ``limit`` rows of ``sql``, read-only; QueryRefused naming why not."""
        conn = self._connection()
        if self.vendor == "sqlite":
            return _sqlite_rows(conn, sql, limit)
        return _postgres_rows(conn, sql, limit)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def query(self, sql: Any) -> dict[str, Any]:
        """db_query: the rows as objects (at most LOOP_READ_MAX_ROWS), or the refusal saying why not."""
        problem = statement_problem(sql)
        if problem:
            return {"refused": problem}
        cap = int(settings.LOOP_READ_MAX_ROWS)
        try:
            columns, rows = self.rows(str(sql), cap + 1)
        except QueryRefused as exc:
            return {"refused": str(exc)}
        answer: dict[str, Any] = {"columns": columns, "rows": []}
        size = 0
        for row in rows[:cap]:
            item = {name: _plain(value) for name, value in zip(columns, row, strict=False)}
            size += len(str(item))
            if size > MAX_ANSWER_CHARS:
                answer["cut"] = f"rows past {len(answer['rows'])} cut at {MAX_ANSWER_CHARS} characters; select fewer"
                break
            answer["rows"].append(item)
        if len(rows) > cap and "cut" not in answer:
            answer["cut"] = f"only the first {cap} rows; add a WHERE or a LIMIT"
        return answer

    def problem(self) -> str | None:
        """Why db_query cannot be used as meant — no read-only login, its views unreadable, or more than its views
        readable — or None (the doctor's Loop proposer reads)."""
        try:
            self._open()
        except QueryRefused as exc:
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - the driver's own words are the doctor's answer
            who = f"as {settings.LOOP_READ_DB_USER} " if self.vendor == "postgresql" else ""
            return f"the read-only connection {who}fails: {str(exc).strip()}"
        answer = self.query("SELECT count(*) AS n FROM ro_cycles")
        if "refused" in answer:
            return f"it cannot read its views ({answer['refused']})"
        outside = self.query("SELECT count(*) AS n FROM django_migrations")
        if "refused" not in outside:
            return "it can read django_migrations, a table outside its views: it must only read the ro_* views"
        if self.vendor == "postgresql":
            _, rows = self.rows(
                "SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls FROM pg_roles "
                "WHERE rolname = current_user",
                1,
            )
            if rows and rows[0][0]:
                return f"{settings.LOOP_READ_DB_USER} is a superuser or may create roles or databases"
        return None

    def schema(self) -> dict[str, Any]:
        """db_schema: each view with what it holds and its columns."""
        views = []
        for name, about in VIEWS.items():
            try:
                columns, _ = self.rows(f"SELECT * FROM {name} LIMIT 0", 0)
            except QueryRefused as exc:
                views.append({"view": name, "about": about, "error": str(exc)})
                continue
            views.append({"view": name, "about": about, "columns": columns})
        return {"views": views, "note": "JSON columns hold JSON text on SQLite; money columns are decimal text"}
