"""Celery tasks (filled in by its owner)."""
