from django.templatetags.static import static
from django.urls import path
from django.views.generic import RedirectView

from singularity import views

urlpatterns = [
    # Pages link the SVG icon; this answers browsers and tools that ask for the old path anyway.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True), name="favicon"),
    path("beings/", views.being_list, name="being-list"),
    path("beings/<str:name>/", views.being_detail, name="being-detail"),
    path("beings/<str:name>/start/", views.being_start, name="being-start"),
    path("beings/<str:name>/stop/", views.being_stop, name="being-stop"),
]
