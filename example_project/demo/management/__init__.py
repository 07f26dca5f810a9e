"""The demo app's management commands: the SMTP sink and the demo set-up."""
