"""The replay selection table's rows, on the Python surface: the same rows
as the Rust table (crates/skein-cli/tests/cli/replay_selection.rs, the
command line's and the web API's columns), read from the same file
(crates/skein-cli/tests/data/replay_selections.json), on the same fixture.

Each row replays its selection with ``Store.replay`` on the echo model and
must select exactly the row's turns, each once (by their questions), or
raise ``RecordedChatError`` when the row says nothing is selected; and
``skein replay`` on the same database must select the very same turns (by
their answers' nodes). On SQLite, then on PostgreSQL when
``SKEIN_TEST_POSTGRES`` names a server (a scratch schema made with
``psql``).

The fixture is made through the command line on a scratch database,
exported, and imported into the table's: the export is where the two runs
the filters need are set apart (``gamma``'s run recorded for the proxy
client ``checkout``; ``old``'s run started in 2020).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import skein

ROWS_FILE = Path(__file__).resolve().parents[2] / "skein-cli/tests/data/replay_selections.json"
ROWS: list[dict[str, Any]] = json.loads(ROWS_FILE.read_text())["rows"]

#: When the ``old`` conversation's run started: 2020-06-01, UTC.
OLD_MS = 1_590_969_600_000


@dataclass
class Place:
    """The table's database, the ``skein`` binary on it, and the fixture."""

    binary: str
    db: str
    dir: Path
    answers: dict[str, str]
    cases: dict[str, Path]

    def run(self, *args: str, db: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, "--db", db or self.db, *args],
            capture_output=True,
            text=True,
            env={**os.environ, "SKEIN_MODEL": "echo"},
            check=False,
        )

    def ok(self, *args: str, db: str | None = None) -> str:
        done = self.run(*args, db=db)
        assert done.returncode == 0, done.stderr
        return done.stdout


def make_place(binary: str, db: str, scratch: Path) -> Place:
    place = Place(binary, db, scratch, {}, {})
    maker = str(scratch / "maker.db")

    def said(question: str, *args: str) -> dict[str, Any]:
        done: dict[str, Any] = json.loads(place.ok("--json", *args, question, db=maker))
        place.answers[question] = done["node"]
        return done

    first = said("apple one", "prompt", "--name", "alpha")
    said("apple two", "prompt", "--cid", "alpha")
    said("banana three", "fork", first["node"], "--name", "beta")
    gamma = said("cherry four", "prompt", "--name", "gamma")["conversation"]
    old = said("damson five", "prompt", "--name", "old")["conversation"]
    lines = []
    for line in place.ok("export", db=maker).splitlines():
        record = json.loads(line)
        if record["kind"] == "run" and record.get("conversation") == gamma:
            record["client"] = "checkout"
        if record["kind"] == "run" and record.get("conversation") == old:
            record["started_ms"] = OLD_MS
            record["finished_ms"] = OLD_MS + 5
        lines.append(json.dumps(record))
    fixture = scratch / "fixture.jsonl"
    fixture.write_text("\n".join(lines) + "\n")
    place.ok("import", str(fixture))
    place.ok("label", "add", "hot", place.answers["apple two"], place.answers["cherry four"])
    cases = scratch / "hot.jsonl"
    place.ok("label", "export", "hot", "-o", str(cases))
    place.cases["hot"] = cases
    return place


def day_ms(day: str) -> int:
    at = datetime.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=datetime.UTC)
    return int(at.timestamp() * 1000)


def turns_of(report: Any) -> list[tuple[str, str]]:
    return [(turn["question"], turn["turn_node"]) for turn in report["turns"]]


def python_cell(place: Place, select: dict[str, Any]) -> list[tuple[str, str]] | None:
    """``Store.replay``: the turns it selected, or ``None`` when refused."""
    store = skein.Store(place.db)
    cases = select.get("cases")
    since, until = select.get("since"), select.get("until")
    try:
        report = store.replay(
            "echo",
            turns=[place.answers[question] for question in select.get("turns", [])],
            conversations=select.get("conversations", []),
            families=select.get("families", []),
            labels=select.get("labels", []),
            cases=place.cases[cases] if cases else None,
            search=select.get("search"),
            since_ms=day_ms(since) if since else None,
            until_ms=day_ms(until) if until else None,
            clients=select.get("clients", []),
            compare=["exact"],
        )
    except skein.RecordedChatError:
        return None
    return turns_of(report)


def cli_cell(place: Place, select: dict[str, Any]) -> list[tuple[str, str]] | None:
    """``skein replay --json``: the turns it selected, or ``None`` when
    refused (exit 2)."""
    args = ["--json", "replay"]
    args += [place.answers[question] for question in select.get("turns", [])]
    for key, flag in [
        ("conversations", "--cid"),
        ("families", "--family"),
        ("labels", "--label"),
        ("clients", "--client"),
    ]:
        for value in select.get(key, []):
            args += [flag, value]
    if "cases" in select:
        args += ["--cases", str(place.cases[select["cases"]])]
    for key in ["search", "since", "until"]:
        if key in select:
            args += [f"--{key}", select[key]]
    done = place.run(*args, "-m", "echo", "--compare", "exact")
    if done.returncode == 2:
        return None
    assert done.returncode in (0, 7), done.stderr
    return turns_of(json.loads(done.stdout))


def check_table(place: Place) -> None:
    failures = []
    for row in ROWS:
        expect = None if row["expect"] is None else sorted(row["expect"])
        python = python_cell(place, row["select"])
        cli = cli_cell(place, row["select"])
        said = None if python is None else sorted(question for question, _ in python)
        if said != expect:
            failures.append(f"{row['name']} on Store.replay: selected {said}, not {expect}")
            continue
        if python is not None and cli is not None:
            if {node for _, node in python} != {node for _, node in cli}:
                failures.append(f"{row['name']}: Store.replay selected {python}, skein replay {cli}")
        elif (python is None) != (cli is None):
            failures.append(f"{row['name']}: Store.replay selected {python}, skein replay {cli}")
    assert not failures, "\n".join(failures)


def test_every_selection_selects_the_same_turns_on_sqlite(
    skein_bin: str, tmp_path: Path
) -> None:
    check_table(make_place(skein_bin, str(tmp_path / "table.db"), tmp_path))


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A scratch schema on the ``SKEIN_TEST_POSTGRES`` server, dropped
    afterwards."""
    base = os.environ.get("SKEIN_TEST_POSTGRES")
    if not base:
        pytest.skip("set SKEIN_TEST_POSTGRES=postgres://... to run it")
    psql = shutil.which("psql")
    if not psql:
        pytest.fail("SKEIN_TEST_POSTGRES is set but psql is not installed")
    schema = f"skein_test_{uuid.uuid4().hex}"

    def sql(statement: str) -> None:
        subprocess.run([psql, base, "-qc", statement], check=True, capture_output=True)

    sql(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in base else "?"
    try:
        yield f"{base}{separator}options=-c%20search_path%3D{schema}"
    finally:
        sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_every_selection_selects_the_same_turns_on_postgres(
    skein_bin: str, tmp_path: Path, postgres_url: str
) -> None:
    check_table(make_place(skein_bin, postgres_url, tmp_path))
