from django.urls import path

from singularity import views

urlpatterns = [
    path("beings/", views.being_list, name="being-list"),
    path("beings/<str:name>/", views.being_detail, name="being-detail"),
    path("beings/<str:name>/start/", views.being_start, name="being-start"),
    path("beings/<str:name>/stop/", views.being_stop, name="being-stop"),
]
