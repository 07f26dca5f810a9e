"""What the sink received: each message as it landed in each recipient's mailbox, and the RCPT replies it gave."""

from django.db import models
from django.utils import timezone


class ReceivedMessage(models.Model):
    """A message in one mailbox: one row per accepted recipient of an SMTP transaction."""

    mailbox = models.CharField(max_length=320, db_index=True)
    #: MAIL FROM; "" for the null sender (DSNs)
    envelope_from = models.CharField(max_length=320, blank=True)
    #: every accepted RCPT TO of the transaction, comma-separated
    envelope_to = models.TextField(blank=True)
    from_header = models.TextField(blank=True)
    to_header = models.TextField(blank=True)
    subject = models.TextField(blank=True)
    message_id = models.CharField(max_length=998, blank=True, db_index=True)
    #: the message exactly as the sink read it after DATA
    data = models.BinaryField()
    #: the sink's DKIM verdict on receipt: "pass d=… s=…", "fail …" or "none"
    dkim = models.CharField(max_length=200, blank=True)
    received = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-received", "-id"]

    def __str__(self) -> str:
        return f"{self.subject!r} in <{self.mailbox}>"

    @property
    def is_bounce(self) -> bool:
        """From the null sender: a delivery status notification."""
        return self.envelope_from == ""


class SmtpEvent(models.Model):
    """The sink's answer to one RCPT TO — the receiving side of deferrals and rejections."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    envelope_from = models.CharField(max_length=320, blank=True)
    recipient = models.CharField(max_length=320)
    reply = models.CharField(max_length=200)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"RCPT <{self.recipient}>: {self.reply}"
