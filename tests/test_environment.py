"""The pinned environment (issue 32): requirements.lock pins every package exactly, for the
Python that pyproject.toml's requires-python, ruff and mypy all name, and the environment these
tests run in holds exactly the lock's versions (on a fresh machine: what `make install` put
there, so a fresh clone's `.ci/run` checks that the lock installs as written)."""
from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata

from tests.helpers import ROOT

LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")


def _pins() -> dict[str, str]:
    pins, bad = {}, []
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = PIN.match(line.strip())
        if m:
            pins[re.sub(r"[-_.]+", "-", m[1]).lower()] = m[2]
        else:
            bad.append(line)
    assert not bad, f"requirements.lock holds lines that are not exact pins (name==version): {bad}"
    return pins


def _lock_python() -> tuple[int, int]:
    m = re.search(r"CPython (\d+)\.(\d+)", LOCK.read_text(encoding="utf-8").split("\n\n")[0])
    assert m, "requirements.lock's header does not name the CPython it was resolved for"
    return int(m[1]), int(m[2])


def test_requires_python_ruff_and_mypy_name_the_locks_python():
    major, minor = _lock_python()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["requires-python"] == f">={major}.{minor}", (
        "requires-python must admit the Python the lock is resolved for, and no older one "
        "(whose wheels the lock does not pin)")
    assert project["tool"]["ruff"]["target-version"] == f"py{major}{minor}"
    assert project["tool"]["mypy"]["python_version"] == f"{major}.{minor}"
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert f"--python-version {major}.{minor}." in makefile, "make lock resolves for another Python"
    assert f"sys.version_info >= ({major}, {minor})" in makefile, "make install does not refuse an older Python"


def test_the_lock_pins_torchs_cpu_build_and_every_dependency():
    pins = _pins()
    assert pins.get("torch", "").endswith("+cpu"), "the lock must pin torch's CPU build"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = list(project["dependencies"]) + [d for ds in project["optional-dependencies"].values() for d in ds]
    names = {re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", d)[0]).lower() for d in wanted}
    assert names <= set(pins), f"dependencies the lock does not pin: {sorted(names - set(pins))}"


def test_this_environment_holds_exactly_the_locks_versions():
    assert sys.version_info[:2] >= _lock_python()
    wrong = {}
    for name, version in _pins().items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = None
        if have != version:
            wrong[name] = (version, have)
    assert not wrong, f"installed versions that differ from requirements.lock (locked, installed): {wrong}"
