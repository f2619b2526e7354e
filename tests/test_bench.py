"""The load script and the floor comparison run (tiny sizes): what ./dev soak and ./dev bench print stays honest."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.repo import REPO


def _stdout(*args: str) -> str:
    """What ``python ARGS`` prints from the repository root; it must exit 0."""
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, check=True, timeout=600
    ).stdout


def _bench(call: str) -> str:
    """What ``call``, a coroutine of bench.benchmark, prints when run with logging off."""
    code = (
        "import asyncio; from crossplane.function import logging; logging.configure(logging.Level.DISABLED); "
        f"from bench import benchmark; asyncio.run(benchmark.{call})"
    )
    return _stdout("-c", code)


def test_load_script_runs_every_kind_without_errors() -> None:
    out = _stdout("bench/soak.py", "--callers", "1", "4", "--rounds", "1", "--requests", "40")
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["warm"], ["new-xr"], ["cold"])]
    assert {(r[0], r[1]) for r in rows} == {(k, c) for k in ("warm", "new-xr", "cold") for c in ("1", "4")}
    assert all(r[6] == "0" for r in rows), out  # the errors column
    assert "refused by design and left out: none" in out


def test_floor_comparison_runs() -> None:
    out = _bench("_against_the_floor(5, restarts=2)")
    assert "ours/floor (steady state, response memo hit):" in out
    assert "memo-miss render (new cluster) / floor:" in out
    assert "cold path (plan miss) / cached render:" in out
    assert "cold full rebuild (changed mirrors) / plan-cached render (new cluster):" in out
    assert "first plan after a restart (every component built; a fresh server each time, median of 2):" in out
    assert "the same servers' plan-cached renders right after it" in out


def test_every_mechanism_is_timed_off_and_on_and_switched_back() -> None:
    code = (
        "from function import cache, encode; from bench import mechanisms; mechanisms.run(2); "
        "assert all('get' not in vars(c) and 'put' not in vars(c) for c in cache.caches()), 'a cache left off'; "
        "assert encode._lasting_part.__module__ == 'function.encode' and encode._KEPT_KEYS > 0, 'encode left off'; "
        "print('names:', '|'.join(mechanisms.mechanisms()))"
    )
    out = _stdout("-c", code)
    names = next(line for line in out.splitlines() if line.startswith("names: "))[len("names: ") :].split("|")
    assert {"cache: plans", "lasting encodings (encode.Lasting)"} <= set(names)
    for name in (*names, "cache: responses"):  # (the runner's memo goes with the runner)
        row = next(line for line in out.splitlines() if line.strip().startswith(name))
        assert row.count("x") >= 4, row  # off / on = ratio, for each of the four cases


def test_the_fleet_runs_its_passes_without_errors_and_prints_the_targets() -> None:
    out = _stdout("bench/benchmark.py", "--fleet", "80", "--fleet-passes", "3", "--fleet-new-share", "0.1")
    # A pass's row: its number, its label in parentheses, then calls, new clusters ... errors.
    rows = {line[0]: line.split(")", 1)[1].split() for line in out.splitlines() if re.match(r"\d \(", line)}
    assert sorted(rows) == ["1", "2", "3"], out
    assert all(r[-1] == "0" for r in rows.values()), out  # the errors column
    assert [r[:2] for r in rows.values()] == [["80", "80"], ["80", "8"], ["80", "8"]], out  # then the share replaced
    assert "targets (issue 21, at 10000 XRs): <= 25% of one core" in out


def test_the_transform_paths_are_timed_against_the_plain_one() -> None:
    out = _bench("_transform_paths(3)")
    for path in ("plain", "no-op transform", "fork (acme_fn)"):
        assert any(line.strip().startswith(path) and "p50/plain" in line for line in out.splitlines()), out


def test_the_soak_polls_a_fleet_of_distinct_servingstacks() -> None:
    out = _stdout("bench/soak.py", "--kinds", "distinct", "--distinct", "60", "--rounds", "2", "--callers", "1")
    rows = [line.split() for line in out.splitlines() if line.split()[:1] == ["distinct"]]
    assert [r[2] for r in rows] == ["1", "2"], out
    assert all(r[6] == "0" for r in rows), out  # the errors column
