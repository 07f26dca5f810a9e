"""The example project's Django configuration: settings, URLs, WSGI."""
