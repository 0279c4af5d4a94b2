"""The Celery application. Tasks are thin wrappers over actions; the database decides who works."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "singularity.settings")

app = Celery("singularity")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
