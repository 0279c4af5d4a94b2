"""Routes of the cards API, mounted at ``/api/``."""

from rest_framework.routers import SimpleRouter

from hitl.api import CardViewSet, NoticeViewSet

router = SimpleRouter()
router.register("cards", CardViewSet, basename="api-card")
router.register("notices", NoticeViewSet, basename="api-notice")

urlpatterns = router.urls
