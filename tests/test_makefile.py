"""`make run` and `make test` stop with one line when the Python is older than 3.11 (or not there)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest
from scripts.harness import REPO


def make(goal: str, python: str) -> subprocess.CompletedProcess:
    """``make -n goal`` as a user types it, also when the suite itself runs under make (``make test``)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")
    }
    return subprocess.run(
        ["make", "-n", goal, f"PYTHON={python}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def older_python() -> str | None:
    """A Python older than 3.11 that runs here, if there is one."""
    found = [shutil.which(f"python3.{minor}") for minor in range(6, 11)]
    found += sorted(glob.glob("/root/.pyenv/versions/3.*/bin/python3"))
    for python in filter(None, found):
        proc = subprocess.run(
            [python, "-c", "import sys; print(sys.version_info < (3, 11))"], capture_output=True, text=True
        )
        if proc.returncode == 0 and proc.stdout.strip() == "True":
            return python
    return None


@pytest.mark.parametrize("goal", ["run", "test"])
def test_a_missing_python_stops_with_one_line(goal):
    proc = make(goal, "/no/such/python3")
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert "/no/such/python3 is not a working Python; this project needs Python 3.11 or later" in proc.stderr


@pytest.mark.parametrize("goal", ["run", "test"])
def test_an_older_python_stops_with_one_line_naming_its_version(goal):
    python = older_python()
    if python is None:
        pytest.skip("no Python older than 3.11 on this machine to try")
    proc = make(goal, python)
    assert proc.returncode != 0 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert f"{python} is Python 3." in proc.stderr and "needs Python 3.11 or later" in proc.stderr


def test_python_3_11_or_later_goes_ahead():
    proc = make("test", shutil.which("python3") or "python3")
    assert proc.returncode == 0, proc.stderr
    assert "pytest" in proc.stdout
