"""The suite's own checks (tests/suite_checks.py): `make test-fast`'s marker expression leaves out every test that
uses the embedded model or a server, even one its author did not mark; a cheap-tier test over the CPU budget
fails; a server's tests spread over two modules are refused. Run on a throwaway test folder in a pytest subprocess
that loads the same hooks."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.suite_checks import HEAVY_FIXTURES, HEAVY_MARKS

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = '''
import pytest
from tests.suite_checks import (pytest_collection_modifyitems, pytest_fixture_setup,  # noqa: F401
                                pytest_runtest_makereport, pytest_runtest_setup, pytest_terminal_summary)

@pytest.fixture(scope="session")
def embedded():
    return "model"

@pytest.fixture(scope="session")
def llama_servers():
    return {}
'''
TESTS = '''
import time

def test_uses_the_model(embedded):
    assert embedded

def test_uses_a_server(llama_servers):
    assert llama_servers == {}

def test_cheap():
    assert True

def test_burns_cpu():
    end = time.process_time() + 0.6
    while time.process_time() < end:
        pass
'''


def fast_marks() -> str:
    (marks,) = re.findall(r"^FAST_MARKS := (.*)$", (ROOT / "Makefile").read_text(), flags=re.M)
    return marks.strip()


def pytest_in(folder: Path, *args: str, budget: str = "30", enforce: str = "1") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALSUITE_TEST_CPU_BUDGET_S": budget,
           "EVALSUITE_TEST_CPU_BUDGET_ENFORCE": enforce}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--rootdir", str(folder), *args], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=120)


def test_fast_marks_leave_out_every_heavy_marker_and_each_is_registered():
    marks = fast_marks()
    assert {m for m in HEAVY_MARKS if f"not {m}" in marks.split(" and ")} == set(HEAVY_MARKS)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert all(f'"{m}:' in pyproject for m in HEAVY_MARKS) and set(HEAVY_FIXTURES.values()) <= set(HEAVY_MARKS)


@pytest.mark.slow
def test_unmarked_users_of_heavy_fixtures_are_marked_and_an_expensive_cheap_test_fails(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_x.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n" + "".join(f"    {m}: x\n" for m in HEAVY_MARKS))
    fast = pytest_in(tmp_path, "--co", "-m", fast_marks())
    assert "test_x.py::test_cheap" in fast.stdout and "test_x.py::test_burns_cpu" in fast.stdout, fast.stdout
    assert "2/4 tests collected (2 deselected)" in fast.stdout, fast.stdout  # the model and server users are out
    heavy = pytest_in(tmp_path, "--co", "-m", "embedded or server")
    assert "test_uses_the_model" in heavy.stdout and "test_uses_a_server" in heavy.stdout, heavy.stdout
    run = pytest_in(tmp_path, "-m", fast_marks(), budget="0.3")
    assert run.returncode == 1 and "1 failed, 1 passed" in run.stdout, run.stdout
    assert "test_burns_cpu spent" in run.stdout and "over the 0.3 CPU-s budget" in run.stdout, run.stdout
    listed = pytest_in(tmp_path, "-m", fast_marks(), budget="0.3", enforce="")  # make test: listed, not failed
    assert listed.returncode == 0 and "2 passed" in listed.stdout, listed.stdout
    assert "over the CPU budget (not failed)" in listed.stdout and "test_burns_cpu spent" in listed.stdout
    (tmp_path / "test_y.py").write_text("def test_also_uses_a_server(llama_servers):\n    pass\n")
    spread = pytest_in(tmp_path, "--co")  # a second module using the same server: xdist would start it twice
    assert spread.returncode == 4 and "must live in one module" in spread.stderr + spread.stdout, spread.stderr
