from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from singularity.ops import views as ops

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="being-list", permanent=False), name="home"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("healthz", ops.healthz, name="healthz"),
    path("readyz", ops.readyz, name="readyz"),
    path("metrics", ops.metrics_view, name="metrics"),
    path("", include("singularity.web_urls")),
    path("", include("singularity.notify.urls")),
    path("evolution/", include("evolution.urls")),
    path("evolution/", include("grading.urls")),
    path("", include("hitl.urls")),
    path("", include("evolution.webhook_urls")),
    path("", include("grading.otlp_urls")),
    path("api/", include("singularity.api_urls")),
    path("api/", include("grading.api_urls")),
    path("api/", include("evolution.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
]
