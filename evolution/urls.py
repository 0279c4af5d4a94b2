"""The loop's pages, mounted at ``/evolution/`` ahead of grading's."""

from django.urls import path

app_name = "evolution"

urlpatterns: list = []
