"""The OTLP/HTTP receiver, mounted at the root: exporters append ``/v1/traces`` to the base URL they are given."""

from django.urls import path

from grading.api_otlp import export_traces

urlpatterns = [path("v1/traces", export_traces, name="otlp-traces")]
