"""The README's "Install in an existing project", followed literally on a fresh machine: a new virtualenv, a
clone of this repository, a new `django-admin startproject` project.

The steps are read from README.md itself — the fenced block after each
`<!-- install:NAME -->` marker — so the README and this test cannot drift
apart. The install commands run as written, with bash, in a directory
holding the clone as `django-mailqueue` (a copy of this working tree) and
with a new virtualenv first on PATH: they build the wheel with
`python -m build` and install it, with its dependencies, from the package
index. One departure, forced: the worker runs with `--once` and an SMTP
server on loopback instead of the provider's relay (the README's `EMAIL_*`
settings, the default route).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import venv
from pathlib import Path

import pytest

from tests.demo.check_demo import copy_working_tree
from tests.support.services import skip_or_fail
from tests.support.smtp_server import SmtpServer

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
STEPS = ("commands", "settings", "migrate", "send", "worker")

pytestmark = pytest.mark.slow


def readme_blocks(text: str) -> dict[str, str]:
    """NAME -> the code of the fenced block right after `<!-- install:NAME -->`."""
    blocks = {}
    for match in re.finditer(r"<!-- install:(\w+) -->\s*\n```\w*\n(.*?)\n```", text, re.DOTALL):
        blocks[match.group(1)] = match.group(2)
    return blocks


def shell_lines(block: str) -> list[list[str]]:
    """The commands of a shell block, comments dropped."""
    return [shlex.split(line, comments=True) for line in block.splitlines() if shlex.split(line, comments=True)]


def subprocess_env(virtualenv: Path | None = None) -> dict[str, str]:
    """This environment without what points into the suite's own project and virtualenv; `virtualenv` first on PATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
        and not k.startswith("MAILQUEUE_")
    }
    if virtualenv is not None:
        env["VIRTUAL_ENV"] = str(virtualenv)
        env["PATH"] = f"{virtualenv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_manage(python: Path, project: Path, args: list[str], timeout: float = 60) -> str:
    result = subprocess.run(
        [str(python), "manage.py", *args],
        cwd=project,
        env=subprocess_env(python.parent.parent),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def manage_args(command: list[str]) -> list[str]:
    """`python manage.py X ...` -> ["X", ...]; anything else in a README step is a mistake."""
    assert command[:2] == ["python", "manage.py"], f"a README step this test cannot follow: {command}"
    return command[2:]


def test_the_readme_marks_every_install_step() -> None:
    blocks = readme_blocks(README.read_text())
    assert sorted(blocks) == sorted(STEPS)


def test_readme_install_steps_deliver_a_message(tmp_path: Path) -> None:
    steps = readme_blocks(README.read_text())
    unpublished = re.search(r"pip install django-mailqueue(?![/\w.-])", README.read_text())
    assert unpublished is None, "the README installs from the package index, where the package is not yet"

    # The install commands, as written, where the clone is ./django-mailqueue and in a new virtualenv.
    copy_working_tree(ROOT, tmp_path / "django-mailqueue")
    virtualenv = tmp_path / "venv"
    venv.create(virtualenv, with_pip=True)
    python = virtualenv / "bin" / "python"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", steps["commands"]],
        cwd=tmp_path,
        env=subprocess_env(virtualenv),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0 and "No matching distribution found for setuptools" in done.stderr:
        skip_or_fail("the package index cannot be reached: python -m build could not get setuptools")
    assert done.returncode == 0, f"the README's install commands failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert list((tmp_path / "django-mailqueue" / "dist").glob("django_mailqueue-*-py3-none-any.whl"))
    where = subprocess.run(
        [str(python), "-c", "import django_mailqueue; print(django_mailqueue.__file__)"],
        cwd=tmp_path,
        env=subprocess_env(virtualenv),
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip().startswith(str(virtualenv)), where.stdout  # the installed wheel, not the clone

    project = tmp_path / "site"
    project.mkdir()
    subprocess.run(
        [str(python), "-m", "django", "startproject", "mysite", str(project)],
        check=True,
        env=subprocess_env(virtualenv),
    )
    settings = project / "mysite" / "settings.py"

    with SmtpServer() as server:
        # The README's settings, as written; then the one change a test must make: the relay its EMAIL_*
        # settings name (the default route) is the test's SMTP server.
        settings.write_text(
            settings.read_text()
            + "\n# --- from README.md ---\n"
            + steps["settings"]
            + "\n"
            + "\n# --- the test's SMTP server instead of the provider's relay ---\n"
            + f'EMAIL_HOST, EMAIL_PORT, EMAIL_USE_TLS = "127.0.0.1", {server.port}, False\n'
        )
        check = run_manage(python, project, ["check"])
        # only information: where mail goes, and the queue's advice for the new project's SQLite database
        reported = set(re.findall(r"\(([\w.]+\.[A-Z]\d+)\)", check))
        assert reported == {"mailqueue.I001", "mailqueue.I010"}, check
        assert "identified 2 issues" in check and "ERRORS" not in check and "WARNINGS" not in check, check
        assert f"the relay 127.0.0.1:{server.port} (no TLS)" in check

        for command in shell_lines(steps["migrate"]):
            run_manage(python, project, manage_args(command))

        run_manage(python, project, ["shell", "-c", steps["send"]])
        assert server.messages == []  # queued, not sent

        (worker,) = shell_lines(steps["worker"])
        output = run_manage(python, project, [*manage_args(worker), "--once"])

    assert "1 delivered" in output, output
    assert len(server.messages) == 1
    message = server.messages[0]
    assert message.mail_from == "noreply@example.com"  # the README's DEFAULT_FROM_EMAIL
    assert message.rcpt_tos == ["someone@example.net"]
    assert b"Subject: Hello\r\n" in message.data
    assert b"It works." in message.data
    assert message.helo == "mail.example.com"  # the README's HOSTNAME
