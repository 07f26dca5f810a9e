"""The example project's URLs: the demo's pages and the Django admin."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("demo.urls")),
    path("admin/", admin.site.urls),
]
