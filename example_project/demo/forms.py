"""The compose form: sender, one or many recipients, subject, body, an optional attachment, a queue."""

import re

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

QUEUES = [
    ("default", "default"),
    ("transactional", "transactional"),
    ("bulk", "bulk"),
]


class ComposeForm(forms.Form):
    from_email = forms.EmailField(label="From", initial="sender@example.com")
    to = forms.CharField(
        label="To",
        help_text="One or more addresses, separated by commas, spaces or new lines.",
        widget=forms.Textarea(attrs={"rows": 2}),
        initial="someone@example.net, greylisted@example.net, nobody@example.net",
    )
    subject = forms.CharField(max_length=200, initial="Hello from django-mailqueue")
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 6}), initial="This message went through the queue.")
    attachment = forms.FileField(required=False, help_text="Optional; up to 5 MB.")
    queue = forms.ChoiceField(
        choices=QUEUES, initial="default", help_text="The lane the item waits in (message.queue)."
    )

    def clean_to(self):
        addresses = [a for a in re.split(r"[\s,;]+", self.cleaned_data["to"]) if a]
        if not addresses:
            raise ValidationError("Name at least one recipient.")
        bad = []
        for address in addresses:
            try:
                validate_email(address)
            except ValidationError:
                bad.append(address)
        if bad:
            raise ValidationError(f"Not an address: {', '.join(bad)}")
        return list(dict.fromkeys(addresses))

    def clean_attachment(self):
        upload = self.cleaned_data.get("attachment")
        if upload and upload.size > 5 * 1024 * 1024:
            raise ValidationError("The demo takes attachments up to 5 MB.")
        return upload
