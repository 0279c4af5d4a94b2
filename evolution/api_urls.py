"""Routes of the loop's REST API, mounted at ``/api/`` (names prefixed ``api-loop-``)."""

urlpatterns: list = []
