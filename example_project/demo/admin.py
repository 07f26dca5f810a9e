"""The sink's mailboxes in the Django admin, read-only (the queue's own pages come with django_mailqueue)."""

from django.contrib import admin

from .models import ReceivedMessage, SmtpEvent


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(ReceivedMessage)
class ReceivedMessageAdmin(ReadOnly):
    list_display = ["received", "mailbox", "envelope_from", "subject"]
    list_filter = ["mailbox"]
    search_fields = ["mailbox", "envelope_from", "subject", "message_id"]
    exclude = ["data"]


@admin.register(SmtpEvent)
class SmtpEventAdmin(ReadOnly):
    list_display = ["at", "envelope_from", "recipient", "reply"]
    search_fields = ["recipient", "envelope_from"]
