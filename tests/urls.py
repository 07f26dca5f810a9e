"""URLs for the test suite: the admin, and /metrics as django-prometheus serves it (the default registry)."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import path


def metrics(request: HttpRequest) -> HttpResponse:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return HttpResponse(generate_latest(), content_type=CONTENT_TYPE_LATEST)


urlpatterns = [path("admin/", admin.site.urls), path("metrics", metrics)]
