"""Benchmarks of django-mailqueue side by side with django-mailer and django-post-office (`make bench`)."""
