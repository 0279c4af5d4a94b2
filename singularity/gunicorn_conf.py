"""gunicorn's settings under ``manage.py up`` (``--config python:singularity.gunicorn_conf``), read from the environment.

WEB_CONCURRENCY worker processes (default 2), each with WEB_THREADS threads
(default 4); WEB_TIMEOUT seconds before a stuck request's worker is replaced.
A worker that exits has its Prometheus multiprocess files marked dead.
"""

from __future__ import annotations

import os
from typing import Any

from singularity.env import env_int

workers = env_int("WEB_CONCURRENCY", 2, minimum=1, maximum=64)
threads = env_int("WEB_THREADS", 4, minimum=1, maximum=256)
worker_class = "gthread"
timeout = env_int("WEB_TIMEOUT", 60, minimum=1)
graceful_timeout = 15
# The proxy in front speaks to us over plain HTTP on a trusted network; X-Forwarded-* are judged by Django's settings.
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
accesslog = None  # requests are logged by Django's middleware (one line each, with its request id)
errorlog = "-"
loglevel = os.environ.get("LOG_LEVEL", "info").lower()
# Application code loaded once in the master, then forked: workers start in well under a second.
preload_app = True
# No control socket: its default path is one per user, shared by every gunicorn that user runs (signals do the job).
control_socket_disable = True

if os.environ.get("LOG_FORMAT") == "json":
    # gunicorn's own lines as JSON too, one object a line (singularity.ops.jsonlog).
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "singularity.ops.jsonlog.JsonFormatter"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
        "loggers": {
            "gunicorn.error": {"handlers": ["console"], "level": loglevel.upper(), "propagate": False},
            "gunicorn.access": {"handlers": ["console"], "level": "INFO", "propagate": False},
        },
        "root": {"handlers": ["console"], "level": loglevel.upper()},
    }


def when_ready(server: Any) -> None:
    """Read the API's documented query parameters once in the master, before the workers are forked (preload)."""
    from singularity.apikit.query import warm

    server.log.info("API schema read: %d operations", warm())


def child_exit(server: Any, worker: Any) -> None:
    """Mark a dead worker's multiprocess metric files, so its gauges stop counting (prometheus-client)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
