"""The lowest version of every runtime dependency pyproject.toml admits, as pip constraints (`name==version`).

    python3 .ci/lowest_versions.py            # print the constraints (pip install -c ...)
    python .ci/lowest_versions.py --install   # install the package, its extras and the test group with them
    python3 .ci/lowest_versions.py --check    # exit 1 unless the running Python has exactly those installed

The runtime dependencies are `[project] dependencies` and the `redis`,
`postgres`, `dkim` and `prometheus` extras; each one's lowest admitted version is its `>=` bound.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
EXTRAS = ("redis", "postgres", "dkim", "prometheus")
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(?:\[[^\]]*\])?\s*(.*)$")


def lowest_versions(pyproject: Path = PYPROJECT) -> dict[str, str]:
    """{distribution name: its lowest admitted version}, for every runtime dependency."""
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in EXTRAS:
        requirements.extend(project["optional-dependencies"][extra])
    lowest: dict[str, str] = {}
    for requirement in requirements:
        match = _REQUIREMENT.match(requirement)
        bound = re.search(r">=\s*([0-9][0-9A-Za-z.]*)", match.group(2)) if match else None
        if match is None or bound is None:
            raise SystemExit(f"{pyproject}: {requirement!r} has no '>=' lower bound")
        lowest[match.group(1)] = bound.group(1)
    return lowest


def install(lowest: dict[str, str]) -> None:
    """Install the package (editable, with its extras) and the test group into the running Python,
    every runtime dependency at its lowest admitted version."""
    root = PYPROJECT.parent
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write("".join(f"{name}=={low}\n" for name, low in lowest.items()))
    command = [sys.executable, "-m", "pip", "install", "--quiet", "-c", constraints.name,
               "-e", f"{root}[{','.join(EXTRAS)}]", "--group", f"{PYPROJECT}:test"]  # fmt: skip
    try:
        subprocess.run(command, check=True)  # noqa: S603 - our own interpreter and arguments
    finally:
        Path(constraints.name).unlink()


def main(argv: list[str]) -> int:
    lowest = lowest_versions()
    if "--install" in argv:
        install(lowest)
        argv = [*argv, "--check"]
    if "--check" not in argv:
        sys.stdout.write("".join(f"{name}=={low}\n" for name, low in lowest.items()))
        return 0
    wrong = []
    for name, low in lowest.items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = "not installed"
        if installed.split("+")[0] not in (low, f"{low}.0", f"{low}.0.0"):
            wrong.append(f"{name} {installed} (lowest admitted: {low})")
        else:
            sys.stdout.write(f"lowest: {name} {installed}\n")
    if wrong:
        sys.stderr.write(f"not the lowest versions: {'; '.join(wrong)}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
