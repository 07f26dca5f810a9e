"""Django's own email backend tests (`BaseEmailBackendTests`) run through QueueEmailBackend and a worker.

    .venv/bin/python tests/interop/django_mail_suite.py DJANGO_SOURCE [--stores sqlite,postgres,memory]
                                                        [--routes explicit|default] [-v]

DJANGO_SOURCE is an unpacked source release of the installed Django (`pip download
django==X.Y.Z --no-binary :all:`); its tests/mail/tests.py is imported from there,
never copied here. Each test class is Django's `BaseEmailBackendTests` on top of
Django's own `SMTPBackendTestsBase` (an aiosmtpd relay on loopback, `EMAIL_HOST`
and `EMAIL_PORT` pointing at it), as Django's `SMTPBackendTests` builds it; the
backend is the queue's, and `get_mailbox_content()` first runs `mailqueue_work
--once` in this process, then returns what the relay received. With `--routes
explicit` (the default) MAILQUEUE["ROUTES"] sends every domain to that relay; with
`--routes default` ROUTES is left out, so the queue's own default route decides. DNS
is a loopback server that knows no name, so nothing is looked up outside.

Prints each test's outcome per store and the failures in full; exits 1 when any
test failed. Not collected by pytest (see docs/interop.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import unittest
from io import StringIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STORES: dict[str, dict[str, Any]] = {
    "sqlite": {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": "default"}},
    "postgres": {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": "pg"}},
    "memory": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"},
}


def load_django_mail_tests(source: Path) -> Any:
    """Django's tests/mail/tests.py module from the source release at `source`."""
    import django

    tests_dir = source / "tests"
    if not (tests_dir / "mail" / "tests.py").is_file():
        raise SystemExit(f"{source} has no tests/mail/tests.py: give the root of an unpacked Django source release")
    version_file = source / "django" / "__init__.py"
    if version_file.is_file():
        namespace: dict[str, Any] = {}
        version_line = next(line for line in version_file.read_text().splitlines() if line.startswith("VERSION"))
        exec(version_line, namespace)  # noqa: S102  (the release's own `VERSION = (5, 2, 19, "final", 0)`)
        if tuple(namespace["VERSION"][:3]) != tuple(django.VERSION[:3]):
            print(f"warning: the source is Django {namespace['VERSION'][:3]}, the installed one {django.VERSION[:3]}")
    sys.path.insert(0, str(tests_dir))
    import mail.tests  # type: ignore[import-not-found]  # Django's test package, from the source release

    for name in ("BaseEmailBackendTests", "SMTPBackendTestsBase"):
        if not hasattr(mail.tests, name):
            raise SystemExit(f"this Django's tests/mail/tests.py has no {name}")
    return mail.tests


def work_once() -> None:
    from django.core.management import call_command

    call_command("mailqueue_work", "--once", stdout=StringIO(), stderr=StringIO())


def queue_backend_tests(mail_tests: Any, store: str, routes: str) -> type[unittest.TestCase]:
    """Django's mixin on Django's aiosmtpd relay, with the queue's backend and the `store`."""
    from django.test import TransactionTestCase, override_settings

    from tests.support.dns_server import DnsServer

    class QueueBackendTests(mail_tests.BaseEmailBackendTests, mail_tests.SMTPBackendTestsBase, TransactionTestCase):
        email_backend = "django_mailqueue.backends.QueueEmailBackend"
        databases = {"default", "pg"} if store == "postgres" else {"default"}

        @classmethod
        def setUpClass(cls) -> None:
            super().setUpClass()  # the relay is up, EMAIL_HOST and EMAIL_PORT point at it
            # DNS on loopback that knows no name: should a route be "mx", nothing is looked up outside.
            dns = cls.enterClassContext(DnsServer())
            mailqueue: dict[str, Any] = {
                "STORE": STORES[store],
                "HOSTNAME": "mq.test.example",
                "DNS": {"NAMESERVERS": [dns.host], "PORT": dns.port, "TIMEOUT": 2},
            }
            if routes == "explicit":
                relay = {"HOST": cls.smtp_controller.hostname, "PORT": cls.smtp_controller.port, "TLS": "none"}
                mailqueue["ROUTES"] = {"*": relay}
            cls.enterClassContext(override_settings(MAILQUEUE=mailqueue))

        def setUp(self) -> None:
            super().setUp()
            self.smtp_handler.flush_mailbox()
            self.addCleanup(self.smtp_handler.flush_mailbox)

        def flush_mailbox(self) -> None:
            self.smtp_handler.flush_mailbox()

        def get_mailbox_content(self) -> list[Any]:
            work_once()
            return list(self.smtp_handler.mailbox)

    QueueBackendTests.__name__ = QueueBackendTests.__qualname__ = f"QueueBackendTests_{store}"
    return QueueBackendTests


class Outcomes(unittest.TextTestResult):
    """Each test's outcome by name: "pass", "FAIL", "ERROR", "skip"; sub-test failures count for their test."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outcome: dict[str, str] = {}

    def _set(self, test: unittest.TestCase, outcome: str) -> None:
        name = test.id().rsplit(".", 1)[-1]
        if self.outcome.get(name) in ("FAIL", "ERROR") and outcome == "pass":
            return
        self.outcome[name] = outcome

    def addSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        super().addSuccess(test)
        self._set(test, "pass")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addFailure(test, err)
        self._set(test, "FAIL")

    def addError(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addError(test, err)
        if isinstance(test, unittest.TestCase):
            self._set(test, "ERROR")

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:  # noqa: N802
        super().addSkip(test, reason)
        self._set(test, "skip")

    def addSubTest(self, test: unittest.TestCase, subtest: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._set(test, "FAIL" if issubclass(err[0], test.failureException) else "ERROR")


def run_store(mail_tests: Any, store: str, routes: str, verbosity: int) -> Outcomes:
    from django.test.utils import setup_databases, teardown_databases

    case = queue_backend_tests(mail_tests, store, routes)
    names = sorted(name for name in dir(mail_tests.BaseEmailBackendTests) if name.startswith("test_"))
    suite = unittest.TestSuite(case(name) for name in names)
    aliases = set(case.databases)  # type: ignore[attr-defined]
    old_config = setup_databases(verbosity=0, interactive=False, aliases=aliases)
    try:
        runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=verbosity, resultclass=Outcomes)
        result = runner.run(suite)
    finally:
        teardown_databases(old_config, verbosity=0)
    assert isinstance(result, Outcomes)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("source", type=Path, help="the root of an unpacked Django source release")
    parser.add_argument("--stores", default="sqlite,postgres,memory", help="comma-separated: sqlite,postgres,memory")
    parser.add_argument("--routes", choices=["explicit", "default"], default="explicit")
    parser.add_argument("-v", "--verbosity", type=int, default=1)
    options = parser.parse_args(argv)
    stores = [name.strip() for name in options.stores.split(",") if name.strip()]
    unknown = set(stores) - set(STORES)
    if unknown:
        parser.error(f"unknown stores: {', '.join(sorted(unknown))}")

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("MAILQUEUE_TEST_PG_DBNAME", "test_mailqueue_django_suite")
    import django
    from django.conf import settings
    from django.test.utils import setup_test_environment

    django.setup()
    setup_test_environment()
    mail_tests = load_django_mail_tests(options.source.resolve())

    results: dict[str, dict[str, str]] = {}
    failures: list[tuple[str, str, str]] = []
    for store in stores:
        print(
            f"\n=== Django {django.get_version()} BaseEmailBackendTests on the {store} store, routes {options.routes}"
        )
        if store == "postgres" and not settings.PG_AVAILABLE:
            print(f"skipped: {settings.PG_REASON}")
            continue
        result = run_store(mail_tests, store, options.routes, options.verbosity)
        results[store] = result.outcome
        failures += [(store, test.id().rsplit(".", 1)[-1], text) for test, text in result.failures + result.errors]

    print("\n=== outcome per test and store")
    names = sorted({name for outcome in results.values() for name in outcome})
    width = max((len(name) for name in names), default=10)
    print(f"{'test':<{width}}  " + "  ".join(f"{store:<8}" for store in results))
    for name in names:
        print(f"{name:<{width}}  " + "  ".join(f"{results[store].get(name, '-'):<8}" for store in results))
    for store, name, text in failures:
        print(f"\n--- {name} on {store}\n{text}")
    failed = sum(outcome in ("FAIL", "ERROR") for per_store in results.values() for outcome in per_store.values())
    passed = sum(outcome == "pass" for per_store in results.values() for outcome in per_store.values())
    print(f"\n{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
