"""`manage.py demo_mailsink [--port N]`: run the local SMTP sink on 127.0.0.1 until SIGINT/SIGTERM."""

import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from demo.sink import sink_controller


class Command(BaseCommand):
    help = "Run the demo's SMTP sink on loopback: the recipients' MX, filing what it accepts into the mailboxes."

    def add_arguments(self, parser):
        parser.add_argument(
            "--port",
            type=int,
            default=settings.DEMO_SINK_PORT,
            help="the port on 127.0.0.1 (default: DEMO_SINK_PORT, 2525)",
        )

    def handle(self, *args, **options):
        port = options["port"]
        controller = sink_controller(port)
        try:
            controller.start()
        except (OSError, RuntimeError) as exc:
            raise CommandError(f"the sink cannot listen on 127.0.0.1:{port}: {exc}") from None
        self.stdout.write(f"sink: listening on 127.0.0.1:{port} as the MX of every domain")
        self.stdout.flush()
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        try:
            while not stop.wait(0.5):
                pass
        finally:
            controller.stop(no_assert=True)
        self.stdout.write("sink: stopped")
