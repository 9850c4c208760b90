"""Fixtures of the Python package's tests: a fresh database per test, the
deterministic models (echo, and scripted rule files from tests/data and the
recorded-chat examples), the lexical embedder wherever none is named, and
the `skein` binary for the cross-surface tests
(SKEIN_BIN, set by scripts/python-package)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import skein

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def echo_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a conversation without naming a model never opens the
    embedded one in these tests."""
    monkeypatch.setenv("SKEIN_MODEL", "echo")


@pytest.fixture(autouse=True)
def lexical_by_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Replays and recorded chats that name no embedder compare with the
    lexical one on every machine, MiniLM downloaded or not (an empty models
    directory), so their verdicts and rankings are the same everywhere."""
    empty = tmp_path / "no-models"
    empty.mkdir()
    monkeypatch.setenv("SKEIN_MODELS_DIR", str(empty))


def pytest_configure(config: pytest.Config) -> None:
    # The note that the lexical embedder stands in, which every test without
    # MiniLM would print; the tests of the note catch it all the same.
    config.addinivalue_line(
        "filterwarnings", "ignore:comparing with the lexical embedder:UserWarning"
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "skein.db"


@pytest.fixture
def store(db: Path) -> skein.Store:
    return skein.Store(db)


@pytest.fixture
def echo() -> skein.Model:
    return skein.Model("echo")


@pytest.fixture
def tools_model_name() -> str:
    return f"scripted:{DATA / 'tools.toml'}"


@pytest.fixture
def tools_model(tools_model_name: str) -> skein.Model:
    return skein.Model(tools_model_name)


@pytest.fixture
def advisor_model_name() -> str:
    return f"scripted:{REPO / 'crates/skein-recorded/examples/data/advisor.toml'}"


@pytest.fixture
def skein_bin() -> str:
    binary = os.environ.get("SKEIN_BIN") or shutil.which("skein")
    if not binary:
        pytest.fail("set SKEIN_BIN to the built `skein` binary (scripts/python-package does)")
    return binary
