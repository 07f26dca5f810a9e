"""The demo's URLs."""

from django.urls import path

from . import views

urlpatterns = [
    path("", views.compose, name="compose"),
    path("mailbox/", views.mailbox, name="mailbox"),
    path("mailbox/<int:pk>/", views.message_detail, name="message"),
    path("mailbox.json", views.state_json, name="state-json"),
]
