"""The Celery application. Tasks are thin wrappers over actions; the database decides who works."""

import os

from celery import Celery

from singularity import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "singularity.settings")
broker.register()

app = Celery("singularity")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
