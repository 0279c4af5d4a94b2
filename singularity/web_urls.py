from django.urls import path

from singularity import views

urlpatterns = [
    path("beings/", views.being_list, name="being-list"),
    path("beings/<str:name>/", views.being_detail, name="being-detail"),
]
