import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "singularity.settings")
application = get_wsgi_application()

from singularity.longlived import freeze  # noqa: E402 - after the apps are loaded

freeze()  # what the process keeps until it exits stays out of the collector's full passes
