"""Running it in production: request context and JSON logs, /healthz and /readyz, /metrics."""
