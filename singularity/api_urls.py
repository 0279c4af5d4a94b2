"""Routes of the REST API, mounted at ``/api/``."""

from rest_framework.routers import SimpleRouter

from singularity.api import BeingViewSet

router = SimpleRouter()
router.register("beings", BeingViewSet, basename="api-being")

urlpatterns = router.urls
