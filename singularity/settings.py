"""Settings for Singularity, read from the environment through strict helpers.

Embedded defaults need no server: SQLite in ``var/``, a file-system Celery
broker, the local git forge and the demo brain. A bad value fails at boot
naming the variable.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from kombu import Queue

from singularity.apikit.camel_fields import IGNORED as CAMEL_CASE_DATA_FIELDS
from singularity.env import env_bool, env_decimal, env_float, env_int, env_secret, env_str
from singularity.forge_env import git_remote, read_forge
from singularity.queues import DEFAULT as DEFAULT_QUEUE
from singularity.queues import QUEUES, ROUTES

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("SINGULARITY_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", False)
DEV_SECRET_KEY = "dev-only-insecure-key-change-me"
SECRET_KEY = env_secret("SECRET_KEY", DEV_SECRET_KEY)
ALLOWED_HOSTS = [h for h in env_str("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in env_str("CSRF_TRUSTED_ORIGINS", "").split(",") if o]
#: Production: ``SINGULARITY_ENV=production`` (README's production guide). It refuses the development secret key.
PRODUCTION = env_str("SINGULARITY_ENV", "development") == "production"
if PRODUCTION and SECRET_KEY == DEV_SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY: production (SINGULARITY_ENV=production) refuses the development key; set SECRET_KEY "
        "(or SECRET_KEY_FILE) to a long random value, e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'"
    )

# --- TLS and cookies (behind a TLS-terminating proxy; README, "Production") -------
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", False)
#: "HTTP_X_FORWARDED_PROTO=https": the header a trusted proxy sets, and the value that means the request came over TLS.
_proxy_ssl = env_str("SECURE_PROXY_SSL_HEADER", "")
if _proxy_ssl:
    _header, _sep, _value = _proxy_ssl.partition("=")
    if not _sep or not _header.strip() or not _value.strip():
        raise ImproperlyConfigured(
            f"SECURE_PROXY_SSL_HEADER: expected HEADER=value, e.g. HTTP_X_FORWARDED_PROTO=https, got {_proxy_ssl!r}"
        )
    SECURE_PROXY_SSL_HEADER = (_header.strip(), _value.strip())
#: Paths never redirected to HTTPS: the probes a load balancer or Prometheus reaches over plain HTTP inside.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]

# --- Operations: metrics and logs ------------------------------------------
#: /metrics answers a request bearing ``Authorization: Bearer <METRICS_TOKEN>``, or from an address in METRICS_ALLOW.
METRICS_TOKEN = env_secret("METRICS_TOKEN", "")
METRICS_ALLOW = [
    a.strip() for a in env_str("METRICS_ALLOW", "" if PRODUCTION else "127.0.0.1,::1").split(",") if a.strip()
]
#: "plain" (one line a record) or "json" (one JSON object a line).
LOG_FORMAT = env_str("LOG_FORMAT", "plain")
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT: expected plain or json, got {LOG_FORMAT!r}")
#: How stale beat's pulse may be before /readyz calls beat down (seconds).
READY_BEAT_STALE_SECS = env_float("READY_BEAT_STALE_SECS", 60.0, minimum=1.0)
READY_WORKER_STALE_SECS = env_float("READY_WORKER_STALE_SECS", 60.0, minimum=1.0)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "django_celery_beat",
    "singularity",
    "singularity.notify",
    "hitl",
    "grading",
    "evolution",
]

MIDDLEWARE = [
    "singularity.ops.middleware.RequestContextMiddleware",  # first: a refused request has its id and its count
    "singularity.input_guard.InputGuardMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "singularity.apikit.middleware.ApiGuardMiddleware",
    "singularity.apikit.camel.CamelQueryMiddleware",  # camelCase query names under /api/ (issue 36)
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "singularity.urls"
WSGI_APPLICATION = "singularity.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "singularity.context_processors.navigation",
                "hitl.context_processors.inbox",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------
_default_db = f"sqlite:///{VAR_DIR / 'db.sqlite3'}"
try:
    DATABASES = {"default": dj_database_url.parse(env_str("DATABASE_URL", _default_db), conn_max_age=0)}
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL: {exc}") from exc

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (web, worker, beat) share the file: wait on locks
    # instead of failing, and take the write lock at BEGIN so two writers
    # never deadlock upgrading a read lock.
    # WAL with synchronous=NORMAL (the default): a commit is written to the WAL but not fsynced, so it survives
    # the process being killed, not the machine losing power (the last commits before a power loss may be gone;
    # the file stays consistent). FULL fsyncs the WAL at every commit: a being's step then survives a power loss
    # too, at the cost of one fsync a step (docs/decisions.md, issue 34).
    _synchronous = env_str("SINGULARITY_SQLITE_SYNCHRONOUS", "NORMAL").upper()
    if _synchronous not in ("NORMAL", "FULL"):
        raise ImproperlyConfigured(f"SINGULARITY_SQLITE_SYNCHRONOUS: expected NORMAL or FULL, got {_synchronous!r}")
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": f"PRAGMA journal_mode=WAL; PRAGMA synchronous={_synchronous};",
    }
    # How long a write waits for another process's lock before it fails (a state I/O error the being survives).
    DATABASES["default"]["OPTIONS"]["timeout"] = env_float("SINGULARITY_SQLITE_TIMEOUT_SECS", 30.0)
    # A file, not memory, so subprocesses started by tests see the test database;
    # one per test run, so two runs side by side never share it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-db-{os.getpid()}.sqlite3")}
else:
    # No JIT: Postgres compiles a statement whose estimated cost passes jit_above_cost, and the planner's
    # estimate of a correlated subquery over a fleet (the breaker's settles, a window per entity) passes it
    # while the statement runs in milliseconds — the compile alone took 270 ms of a 20 ms read (issue 18).
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c jit=off"
    # A pool of open connections (psycopg_pool, through Django's own support): a request or a task takes one and
    # hands it back when it ends, instead of opening a connection of its own (some 10 ms on the 2-core machine
    # the pages are measured on: a tenth of the fleet's page, half of a small one). The web server's threads and
    # the worker's share it. Opt-in (``SINGULARITY_DB_POOL=true``): after every idle connection of a pool of a
    # dozen was ended (a restart; in the suite, a test ending every backend), the next caller waited past the
    # timeout — psycopg_pool waits 1, 2, 4… s between the dead connections its check meets (docs/decisions.md,
    # issue 18 seventh pass) — so it stays off by default. ``max_size`` bounds what one process holds open at once;
    # a caller waits up to ``timeout`` seconds for one to come back, then fails with a clear error.
    # A connection is checked as it is handed out (Django's health check, one round trip): one the server ended while
    # it sat in the pool (a restart, an idle timeout, a terminated backend) is replaced, never handed to a request.
    if env_bool("SINGULARITY_DB_POOL", False):
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": 1,
            "max_size": env_int("SINGULARITY_DB_POOL_MAX", 20, minimum=1, maximum=1000),
            "timeout": env_float("SINGULARITY_DB_POOL_TIMEOUT_SECS", 30.0),
        }
        DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # One test database per test run, so two runs side by side never share it.
    _test_db = f"test_{DATABASES['default'].get('NAME') or 'singularity'}_{os.getpid()}"
    DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME", _test_db)}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

# --- REST API -------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "singularity.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "singularity.apikit.schema.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "singularity.apikit.pagination.Cursor",
    "PAGE_SIZE": 20,  # singularity.apikit.pagination.PAGE_SIZE: every list, its cursor and limit
    # The API is for scripts: JSON bodies only, read within bounds.
    "DEFAULT_PARSER_CLASSES": ["singularity.apikit.camel.CamelJSONParser"],
    # One spelling across /api/: camelCase in and out, snake_case inside (singularity.apikit.camel, issue 36).
    "DEFAULT_RENDERER_CLASSES": [
        "singularity.apikit.camel.CamelJSONRenderer",
        "djangorestframework_camel_case.render.CamelCaseBrowsableAPIRenderer",
    ],
    "EXCEPTION_HANDLER": "singularity.apikit.errors.exception_handler",
    "COERCE_DECIMAL_TO_STRING": True,
}
#: djangorestframework-camel-case: the fields whose values are data keep their keys verbatim both ways.
JSON_CAMEL_CASE = {
    "JSON_UNDERSCOREIZE": {
        "no_underscore_before_number": False,
        "ignore_fields": CAMEL_CASE_DATA_FIELDS,
        "ignore_keys": None,
    },
}
#: The largest request body the API reads (bytes): a longer one is refused with 413 before it is read.
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 2_621_440, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = max(API_MAX_BODY_BYTES, 2_621_440)
#: A run's trace (grading/spans.py): at most this many spans, each at most this many bytes of JSON, and the
#: whole at most TRACE_MAX_BYTES. A reported trace over one is refused with a 400 naming it; the engine's own
#: runners keep within them (docs/decisions.md, issue 28).
TRACE_MAX_SPANS = env_int("TRACE_MAX_SPANS", 2000, minimum=1)
TRACE_MAX_SPAN_BYTES = env_int("TRACE_MAX_SPAN_BYTES", 65_536, minimum=1024)
TRACE_MAX_BYTES = env_int("TRACE_MAX_BYTES", 8_388_608, minimum=1024)
#: OTLP/HTTP traces in (POST /v1/traces, grading/otlp_*.py): a body at most OTLP_MAX_BODY_BYTES as sent and
#: OTLP_MAX_DECOMPRESSED_BYTES once gunzipped (413 past either); a trace becomes a run OTLP_GRACE_SECS after its
#: root span arrives (late children still attach), and one whose root never arrives is closed as failed
#: OTLP_ORPHAN_SECS after its first span; an assembled trace's row (trace id → run, for late spans and retries)
#: is removed by the sweep OTLP_KEEP_SECS after assembly (docs/decisions.md, issue 30).
OTLP_MAX_BODY_BYTES = env_int("OTLP_MAX_BODY_BYTES", 2_621_440, minimum=1024)
OTLP_MAX_DECOMPRESSED_BYTES = env_int("OTLP_MAX_DECOMPRESSED_BYTES", 16_777_216, minimum=1024)
OTLP_GRACE_SECS = env_float("OTLP_GRACE_SECS", 5.0)
OTLP_ORPHAN_SECS = env_float("OTLP_ORPHAN_SECS", 600.0)
OTLP_KEEP_SECS = env_float("OTLP_KEEP_SECS", 3600.0)
SPECTACULAR_SETTINGS = {
    "TITLE": "Singularity API",
    "DESCRIPTION": "Control plane for autonomous LLM agents: beings, the brain, grading and the self-evolving loop.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "BeingStatusEnum": "singularity.models.Being.Status",
        "CycleStatusEnum": "singularity.models.Cycle.Status",
        "EntityKindEnum": "grading.models.Entity.Kind",
        "ExecutionStatusEnum": "grading.models.Execution.Status",
        "GradeStatusEnum": "grading.models.Grade.Status",
        "CalibrationStatusEnum": ["ok", "low"],
        # An entity's load status and a span's status are the same choice set: one name for both.
        "OkOrErrorEnum": ["ok", "error"],
        "CardRefusalEnum": ["unauthorized_responder", "already_closed", "invalid", "not_found"],
        "EpisodeStatusEnum": ["open", "closed"],
        # Two "state" choice sets (a pull's, a commit status's): named, so check --deploy stays clean (issue 37).
        "PullStateEnum": ["open", "merged", "closed"],
        "CommitStateEnum": ["pending", "success", "failure", "error"],
        # Three "source" choice sets: a run's, a judge method's and a loop prompt's (issue 36: no hash names).
        "RunSourceEnum": "grading.models.Execution.Source",
        "MethodSourceEnum": ["engine", "engine-customised", "brain"],
        "PromptSourceEnum": ["engine", "brain"],
    },
    # Every operation documents the errors the shared machinery can answer (singularity.apikit.schema).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "singularity.apikit.schema.document_errors",
        # POST /v1/traces, the OTLP/HTTP receiver (a plain view, its own protocol's shapes): grading.otlp_schema.
        "grading.otlp_schema.document_otlp",
        # One spelling (issue 36): the components' properties and the query parameters in camelCase.
        "drf_spectacular.contrib.djangorestframework_camel_case.camelize_serializer_fields",
        "singularity.apikit.camel.camelize_query_parameters",
    ],
}

# --- Celery ---------------------------------------------------------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    # The embedded broker delivers each message whole (write, then rename): singularity.broker.
    CELERY_BROKER_URL = "singularity-fs://" + CELERY_BROKER_URL[len("filesystem://") :]
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
    for _folder in ("queue", "processed", "control"):
        (_broker_dir / _folder).mkdir(parents=True, exist_ok=True)
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # A message a worker took and had not started when it died stays in Redis' ``unacked`` hash until this many
    # seconds after it was taken, then goes back to its queue for another worker (Celery's default is an hour).
    # A message waiting longer than this in a live worker's prefetch is delivered twice: harmless (a grade is
    # claimed once), so keep it above the longest a task waits behind the others a worker took.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT_SECS", 3600, minimum=1),
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# django-celery-beat's database scheduler, writing beat's pulse at each tick (singularity.beat).
CELERY_BEAT_SCHEDULER = "singularity.beat:Scheduler"
# Grading, the loop and the beings each on a queue of their own (singularity.queues); a worker started without -Q
# consumes every one.
CELERY_TASK_QUEUES = [Queue(name, routing_key=name) for name in QUEUES]
CELERY_TASK_DEFAULT_QUEUE = DEFAULT_QUEUE
CELERY_TASK_ROUTES = ROUTES
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TIMEZONE = TIME_ZONE
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# --- The being ------------------------------------------------------------
SINGULARITY_STARTING_BALANCE_USD = env_decimal("SINGULARITY_STARTING_BALANCE_USD", "10")
SINGULARITY_CHILD_STARTING_BALANCE_USD = env_decimal(
    "SINGULARITY_CHILD_STARTING_BALANCE_USD", str(SINGULARITY_STARTING_BALANCE_USD)
)
#: True: a child starts with SINGULARITY_CHILD_STARTING_BALANCE_USD from configuration (the origin's way);
#: False: a child is funded by a transfer from its parent's remaining balance.
SINGULARITY_CHILD_FRESH_BALANCE = env_bool("SINGULARITY_CHILD_FRESH_BALANCE", False)
#: How many solvent children one being may have at a time.
SINGULARITY_MAX_LIVE_CHILDREN = env_int("SINGULARITY_MAX_LIVE_CHILDREN", 5, minimum=0)
SINGULARITY_MAX_TOOL_ROUNDS = env_int("SINGULARITY_MAX_TOOL_ROUNDS", 8, minimum=1)
SINGULARITY_CYCLE_INTERVAL_SECS = env_float("SINGULARITY_CYCLE_INTERVAL_SECS", 5.0)
SINGULARITY_INSTANCE_USD_PER_HOUR = env_decimal("SINGULARITY_INSTANCE_USD_PER_HOUR", "0")
SINGULARITY_SHUTDOWN_GRACE_SECS = env_float("SINGULARITY_SHUTDOWN_GRACE_SECS", 5.0)
SINGULARITY_TOOL_TIMEOUT_SECS = env_float("SINGULARITY_TOOL_TIMEOUT_SECS", 60.0)
SINGULARITY_MCP_CONFIG = env_str("SINGULARITY_MCP_CONFIG", "")
#: A dead MCP server is restarted before the next cycle; after a failed restart the next waits this long, doubling.
SINGULARITY_MCP_RESTART_BACKOFF_SECS = env_float("SINGULARITY_MCP_RESTART_BACKOFF_SECS", 1.0)
SINGULARITY_WORKSPACE = Path(env_str("SINGULARITY_WORKSPACE", str(VAR_DIR / "workspace")))
#: Where links in cards and PR bodies point; by default the dashboard `make run` serves on PORT.
SINGULARITY_PUBLIC_URL = env_str("SINGULARITY_PUBLIC_URL", f"http://127.0.0.1:{env_str('PORT', '8000')}")
# How long a worker may hold a being between saves before another may take it.
#: Reserve each model call's worst case before making it, so the balance cannot cross zero (issue 34);
#: off by default: the origin's behaviour, the seed's journal (see docs/decisions.md).
SINGULARITY_COST_RESERVATION = env_bool("SINGULARITY_COST_RESERVATION", False)
SINGULARITY_LEASE_SECS = env_int("SINGULARITY_LEASE_SECS", 600, minimum=10)

# --- The brain -------------------------------------------------------------
#: A path or URL of the brain's git repository. Empty: a local bare repository
#: made from the bundled demo brain under var/ (created by `brain sync`).
BRAIN_REPO = env_str("BRAIN_REPO", "")
BRAIN_BRANCH = env_str("BRAIN_BRANCH", "main")
BRAIN_CHECKOUT = Path(env_str("BRAIN_CHECKOUT", str(VAR_DIR / "brain")))
BRAIN_SYNC_SECS = env_float("BRAIN_SYNC_SECS", 60.0)
#: How long the brain's own functions (window, should_open, compare, verdict, measure) may take to answer.
BRAIN_CODE_DEADLINE_SECS = env_float("BRAIN_CODE_DEADLINE_SECS", 60.0, minimum=0.001)
#: How long a brain module may take to import in the sandbox before it is a load error naming the file.
BRAIN_IMPORT_DEADLINE_SECS = env_float("BRAIN_IMPORT_DEADLINE_SECS", 10.0, minimum=0.001)
#: The address space each sandbox process may use, in MB (``resource.setrlimit``): brain code past it fails.
BRAIN_CODE_MEMORY_MB = env_int("BRAIN_CODE_MEMORY_MB", 1024, minimum=64)
#: How many sandbox processes brain code runs in, per engine process (started as calls need them).
BRAIN_SANDBOX_PROCESSES = env_int("BRAIN_SANDBOX_PROCESSES", 4, minimum=1)
#: How long a scenario's pipeline run(ctx, input) may take (its model and tool calls included).
BRAIN_PIPELINE_DEADLINE_SECS = env_float("BRAIN_PIPELINE_DEADLINE_SECS", 900.0, minimum=0.001)
#: How long a proposer pipeline's run(ctx, brief) may take (never past the round's review deadline).
LOOP_PIPELINE_DEADLINE_SECS = env_float("LOOP_PIPELINE_DEADLINE_SECS", 900.0, minimum=0.001)
#: The proposer agent's turns (model calls) in one round; the last is asked to answer without tools (issue 33).
LOOP_PROPOSER_MAX_TURNS = env_int("LOOP_PROPOSER_MAX_TURNS", 12, minimum=1, maximum=100)
#: How often, during one of the proposer agent's model calls, the kill switch and the holds are read: one thrown
#: abandons the call in flight within about this long (R7.22).
LOOP_PROPOSER_POLL_SECS = env_float("LOOP_PROPOSER_POLL_SECS", 1.0, minimum=0.05)
#: The proposer's db_query: its statement deadline and the most rows one query hands back.
LOOP_READ_STATEMENT_TIMEOUT_MS = env_int("LOOP_READ_STATEMENT_TIMEOUT_MS", 5000, minimum=10)
LOOP_READ_MAX_ROWS = env_int("LOOP_READ_MAX_ROWS", 200, minimum=1, maximum=10000)
#: On Postgres, the role the proposer's queries log in as (made by evolution's migration 0020, SELECT on the
#: ro_* views only) and its password; empty: one derived from SECRET_KEY, which ``migrate`` gives the role.
LOOP_READ_DB_USER = env_str("LOOP_READ_DB_USER", "singularity_proposer")
LOOP_READ_DB_PASSWORD = env_secret("LOOP_READ_DB_PASSWORD", "")
#: How long a worker holds a round's apply before the due-step sweep hands it to another (its worker died).
LOOP_APPLY_LEASE_SECS = env_float("LOOP_APPLY_LEASE_SECS", 900.0, minimum=1.0)
#: How long an analysing worker's heartbeat stays good: past it the tick's sweep takes the analysis as lost (two ticks).
LOOP_ANALYSIS_LEASE_SECS = env_float("LOOP_ANALYSIS_LEASE_SECS", 60.0, minimum=1.0)
#: How many of one agent's asks (approval cards: settings widenings, ideas, supervision moves) may wait at once.
LOOP_AGENT_MAX_PENDING_CARDS = env_int("LOOP_AGENT_MAX_PENDING_CARDS", 20, minimum=1)
#: How long a step handed to a worker may wait for it before the tick's sweep hands it over again.
LOOP_STEP_RESEND_AFTER_SECS = env_float("LOOP_STEP_RESEND_AFTER_SECS", 60.0)
DEMO_BRAIN_DIR = BASE_DIR / "demo_brain"
#: Where the loop's pull requests live: "local" (a bare repository plus rows; the embedded default) or "github".
#: GitHub: GITHUB_REPOSITORY (owner/name), GITHUB_API_URL (GHES: https://<host>/api/v3), a credential —
#: GITHUB_TOKEN / GITHUB_TOKEN_FILE first, or a GitHub App (GITHUB_APP_ID, GITHUB_APP_PRIVATE_KEY_FILE,
#: GITHUB_APP_INSTALLATION_ID) — and GITHUB_WEBHOOK_SECRET / _FILE for /github/webhook/ (singularity.forge_env).
_forge = read_forge()
LOOP_FORGE: str = _forge["LOOP_FORGE"]
GITHUB_API_URL: str = _forge["GITHUB_API_URL"]
GITHUB_REPOSITORY: str = _forge["GITHUB_REPOSITORY"]
#: Opt-in (issue 35): a pull request opened, pushed to or reopened on GitHub that the loop did not open starts the
#: pre-merge check (evolution.forges.github_pr_check); off, a person asks (button, API, manage.py loop check-pr).
LOOP_CHECK_PULLS: bool = env_bool("LOOP_CHECK_PULLS", False)
GITHUB_TOKEN: str = _forge["GITHUB_TOKEN"]
#: Which variable the token came from (GITHUB_TOKEN, else GH_TOKEN): how messages name the credential.
GITHUB_TOKEN_VAR: str = _forge["GITHUB_TOKEN_VAR"]
GITHUB_APP_ID: int = _forge["GITHUB_APP_ID"]
GITHUB_APP_PRIVATE_KEY_FILE: str = _forge["GITHUB_APP_PRIVATE_KEY_FILE"]
GITHUB_APP_INSTALLATION_ID: int = _forge["GITHUB_APP_INSTALLATION_ID"]
GITHUB_WEBHOOK_SECRET: str = _forge["GITHUB_WEBHOOK_SECRET"]
#: The GitHub client's patience: a request's timeout; how many times (and from how long a first wait, doubling) a
#: temporary failure is retried; the longest Retry-After honoured in place (a longer one fails the step as temporary).
GITHUB_TIMEOUT_SECS: float = _forge["GITHUB_TIMEOUT_SECS"]
GITHUB_RETRIES: int = _forge["GITHUB_RETRIES"]
GITHUB_RETRY_BACKOFF_SECS: float = _forge["GITHUB_RETRY_BACKOFF_SECS"]
GITHUB_RETRY_MAX_WAIT_SECS: float = _forge["GITHUB_RETRY_MAX_WAIT_SECS"]
#: GitHub asks integrators to space writes (secondary rate limits); reads are not spaced.
GITHUB_SECONDS_BETWEEN_WRITES: float = _forge["GITHUB_SECONDS_BETWEEN_WRITES"]
if LOOP_FORGE == "github" and not BRAIN_REPO:
    #: The checkout follows the GitHub repository the loop opens its pull requests on.
    BRAIN_REPO = git_remote(GITHUB_API_URL, GITHUB_REPOSITORY)
#: The local forge's branch protection: the commit statuses a pull request needs before a person may merge it.
LOCAL_FORGE_REQUIRED_STATUSES = [
    s.strip()
    for s in env_str("LOCAL_FORGE_REQUIRED_STATUSES", "singularity/diff-gate,singularity/validation").split(",")
    if s.strip()
]
#: The merge methods the local forge allows an auto-merge arm (it makes merge commits, so reverts stay mechanical).
LOCAL_FORGE_MERGE_METHODS = [s.strip() for s in env_str("LOCAL_FORGE_MERGE_METHODS", "merge").split(",") if s.strip()]
#: The project tier of the loop's functions (R5.2): dotted paths of callables answering for every entity whose
#: own <id>.loop.py does not define the function — the trigger's rule, the post-merge comparator, the window,
#: the pre-merge check's verdict and grading's measure.
LOOP_SHOULD_OPEN = env_str("LOOP_SHOULD_OPEN", "")
LOOP_COMPARE = env_str("LOOP_COMPARE", "")
LOOP_WINDOW = env_str("LOOP_WINDOW", "")
LOOP_VERDICT = env_str("LOOP_VERDICT", "")
LOOP_MEASURE = env_str("LOOP_MEASURE", "")
#: Where the loop makes its throwaway clones.
LOOP_WORK_DIR = Path(env_str("LOOP_WORK_DIR", str(VAR_DIR / "loop")))

# --- The LLM gateway (Brama) ----------------------------------------------
BRAMA_BASE_URL = env_str("BRAMA_BASE_URL", "")
BRAMA_MODEL = env_str("BRAMA_MODEL", "demo-model")
BRAMA_API_KEY = env_secret("BRAMA_API_KEY", "")
BRAMA_HMAC_SECRET_FILE = env_str("BRAMA_HMAC_SECRET_FILE", "")
BRAMA_AGENT_ID = env_str("BRAMA_AGENT_ID", "singularity")
BRAMA_INPUT_PRICE_USD_PER_MILLION = env_decimal("BRAMA_INPUT_PRICE_USD_PER_MILLION", "0")
BRAMA_OUTPUT_PRICE_USD_PER_MILLION = env_decimal("BRAMA_OUTPUT_PRICE_USD_PER_MILLION", "0")
BRAMA_TIMEOUT_SECS = env_float("BRAMA_TIMEOUT_SECS", 120.0)
BRAMA_MAX_RETRIES = env_int("BRAMA_MAX_RETRIES", 2, minimum=0)
#: The ``max_tokens`` sent with a being's model call while reservations are on (the worst case reserved).
BRAMA_MAX_TOKENS = env_int("BRAMA_MAX_TOKENS", 4096, minimum=1)
#: Start a demo triage run and a pricing run every 20 s (on by default only when the demo model answers).
DEMO_DRIVER = env_bool("SINGULARITY_DEMO_DRIVER", not BRAMA_BASE_URL)

# --- Telegram: cards and notices pushed to a chat (off unless token and chat are set)
TELEGRAM_BOT_TOKEN = env_secret("TELEGRAM_BOT_TOKEN", "")
TELEGRAM_CHAT_ID = env_str("TELEGRAM_CHAT_ID", "")
#: "<telegram user id>:<username>,…" — who may answer, merged with the admin's Telegram users table.
TELEGRAM_USERS = env_str("TELEGRAM_USERS", "")
#: Telegram chats routed to chat roles: "<chat id>:<role slug>,…" ("*" for every other private chat).
TELEGRAM_ROLE_CHATS = env_str("TELEGRAM_ROLE_CHATS", "")
TELEGRAM_WEBHOOK_SECRET = env_secret("TELEGRAM_WEBHOOK_SECRET", "")
TELEGRAM_API_URL = env_str("TELEGRAM_API_URL", "https://api.telegram.org/bot")
TELEGRAM_SEND_PER_SECOND = env_float("TELEGRAM_SEND_PER_SECOND", 1.0, minimum=0.001)

if BRAMA_HMAC_SECRET_FILE and not Path(BRAMA_HMAC_SECRET_FILE).is_file():
    raise ImproperlyConfigured(f"BRAMA_HMAC_SECRET_FILE: no such file {BRAMA_HMAC_SECRET_FILE!r}")
if SINGULARITY_MCP_CONFIG and not Path(SINGULARITY_MCP_CONFIG).is_file():
    raise ImproperlyConfigured(f"SINGULARITY_MCP_CONFIG: no such file {SINGULARITY_MCP_CONFIG!r}")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        # One JSON object a line, a message with newlines included (singularity.ops.jsonlog).
        "json": {"()": "singularity.ops.jsonlog.JsonFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["context"]},
    },
    # Celery's "sending due task" / "received" / "succeeded" for routine ticks: dropped (see log_filters).
    "filters": {
        "quiet_ticks": {"()": "singularity.log_filters.QuietPeriodicTicks"},
        "context": {"()": "singularity.ops.jsonlog.ContextFilter"},
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "httpx": {"level": "WARNING"},
        # PyGithub logs whole responses at DEBUG, an App's installation token among them: never below INFO.
        "github": {"level": "INFO"},
        "mcp": {"level": "WARNING"},
        "celery.beat": {"filters": ["quiet_ticks"]},
        "celery.worker.strategy": {"filters": ["quiet_ticks"]},
        "celery.app.trace": {"filters": ["quiet_ticks"]},
    },
}

from singularity.schedule import BEAT_SCHEDULE  # noqa: E402

CELERY_BEAT_SCHEDULE = BEAT_SCHEDULE
