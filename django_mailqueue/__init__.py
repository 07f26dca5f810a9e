"""django-mailqueue: a durable outbound mail queue for Django, with workers that deliver it."""

__version__ = "0.1.0"
