from django.urls import path

from singularity.notify import views

urlpatterns = [
    path("notifications/", views.destinations, name="notify-destinations"),
    path("notifications/<slug:name>/", views.destination_log, name="notify-destination"),
]
