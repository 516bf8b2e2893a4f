"""A job's phase has one writer (issue 26): ``Context.move`` (``controller/model/context.py``), which
checks the move against the job state machine (``core.phases``). This reads the source: any other
assignment to a ``.phase`` attribute in the modules that handle jobs fails here. (A new job's row
is made ``Queued`` by ``JobService.submit``: a keyword of the constructor, not an assignment. The
SampleSets' own phases, ``controller/services/samplesets.py`` and ``sampleset_loop.py``, are another
state machine.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from paddlecloud.controller.model.context import Context
from paddlecloud.core.phases import InvalidTransition, JobPhase
from paddlecloud.store.tables import JobRow

__all__: list[str] = []

SRC = Path(__file__).resolve().parents[2] / "src" / "paddlecloud"
#: the one writer, and the SampleSet state machine's modules
ALLOWED = {
    SRC / "controller" / "model" / "context.py",
    SRC / "controller" / "services" / "samplesets.py",
    SRC / "controller" / "loop" / "sampleset_loop.py",
}


def phase_writes(path: Path, attr: str = "phase") -> list[int]:
    """Lines of ``path`` that assign to some ``X.<attr>`` (plain, tuple or augmented assignment)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        if any(isinstance(t, ast.Attribute) and t.attr == attr for t in flat):
            lines.append(node.lineno)
    return lines


def test_only_context_move_writes_a_jobs_phase() -> None:
    found = {
        str(p.relative_to(SRC)): phase_writes(p)
        for p in sorted(SRC.rglob("*.py"))
        if p not in ALLOWED and phase_writes(p)
    }
    assert found == {}


def test_only_the_placement_codec_writes_a_jobs_placement() -> None:
    """``controller/model/placement.py`` is the one writer (and reader) of ``JobRow.placement``'s JSON."""
    codec = SRC / "controller" / "model" / "placement.py"
    found = {
        str(p.relative_to(SRC)): phase_writes(p, "placement")
        for p in sorted((SRC / "controller").rglob("*.py"))
        if p != codec and phase_writes(p, "placement")
    }
    assert found == {}
    assert phase_writes(codec, "placement")


#: reads of a row's stored spec (its JSON), parsed or raw: ``row.spec.get(``, ``row.spec[``, an alias
#: of it, or a parse of it outside the cache
RAW_SPEC = re.compile(r"\.spec\.get\(|\.spec\[|= \w+\.spec$|from_stored\(\w+\.spec\)", re.M)


def test_only_the_spec_cache_reads_a_jobs_stored_spec() -> None:
    """``controller/model/specs.py`` parses a stored spec once per job (``SpecCache``) and reads the two
    counts a listing shows; ``views.detail_view`` parses the one job a request asks for (with the
    ``spec_unreadable`` answer when it no longer passes the rules)."""
    allowed = {SRC / "controller" / "model" / "specs.py"}
    found = {
        str(p.relative_to(SRC)): [m.group(0) for m in RAW_SPEC.finditer(p.read_text())]
        for p in sorted((SRC / "controller").rglob("*.py"))
        if p not in allowed
    }
    assert {k: v for k, v in found.items() if v} == {"controller/model/views.py": ["from_stored(row.spec)"]}


def test_the_scan_sees_each_form_of_assignment(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("row.phase = 1\nrow.phase, row.reason = 2, 'x'\nrow.other = 3\nJobRow(phase=4)\n")
    assert phase_writes(src) == [1, 2]
    assert phase_writes(SRC / "controller" / "model" / "context.py")  # the one writer is seen too


class _Clock:
    def now(self) -> float:
        return 42.0


def _row(phase: JobPhase) -> JobRow:
    return JobRow(user="u", name="j", phase=phase, reason="", message="", finished_at=None)


def test_move_checks_the_table_and_stamps_a_terminal_phase() -> None:
    ctx = Context.__new__(Context)  # move needs only the clock
    ctx.clock = _Clock()  # type: ignore[assignment]
    row = _row(JobPhase.RUNNING)
    ctx.move(row, JobPhase.QUEUED, "NotAdopted", "queued again")
    assert (row.phase, row.reason, row.message, row.finished_at) == (
        JobPhase.QUEUED,
        "NotAdopted",
        "queued again",
        None,
    )
    ctx.move(row, JobPhase.KILLED, "Killed", "killed by u")
    assert row.finished_at == 42.0
    with pytest.raises(InvalidTransition, match="from Killed to Running"):
        ctx.move(row, JobPhase.RUNNING, "Running", "")
    assert row.phase == JobPhase.KILLED
