"""The admin, for `bench/admin_pages.py`."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
