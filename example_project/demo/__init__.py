"""The demo app: a compose page, a local SMTP sink acting as the recipients' MX, and their mailboxes."""
