"""Routes mounted at the site's root for services that post to this deployment: GitHub's webhook."""

from django.urls import path

from evolution.views.github import github_webhook_view

urlpatterns = [
    path("github/webhook/", github_webhook_view, name="github-webhook"),
]
