"""What a report scores: kernels per task from a run or stage of the store, a directory, a JSON, or the seeds.

Source specs (``kernelrl bench --source SPEC``, repeatable, each a column of the report):

| spec | kernels |
|---|---|
| ``seeds`` | the built-in seed corpus: every seed that is not ``expect: wrong``, best per task after scoring |
| ``seeds:all`` | every seed, each its own row (the report counts kernels, not tasks) |
| ``DIR`` | ``<task name>.py`` files (``02_Softmax.py``, ``Softmax.py`` or ``level1/02_Softmax.py``) |
| ``FILE.json`` / ``.jsonl`` | task -> code: ``{"02_Softmax": "..."}``, or records with a task reference and the code |
| ``RUN/STAGE[+STAGE...]`` | the best successful candidates per task that STAGE(s) of RUN produced |
| ``run:RUN`` or a run's name | the best successful candidates per task over the whole run |
| ``stage:STAGE`` or a stage name | the best of STAGE over every run (``--run`` narrows it) |
| ``policy:RUN/STAGE[@FORMAT]`` | k fresh samples of the stage's final checkpoint, each a row (reports/policy.py) |
| ``baseline:compile[-reduce-overhead]``, ``baseline:cuda-graph`` | the reference itself, compiled or in a CUDA graph |

A JSON record's task reference is ``task``, ``task_key``, ``name``, or ``level``/``level_id`` +
``task_id``/``problem_id``; its code is ``code``, ``custom_code``, ``source`` or ``kernel``.

"Best" is the candidate's latest stored score (any purpose); ``top_k`` > 1 re-scores the k best and keeps the
best final score. Tasks with no kernel in a source become unsuccessful rows ("no candidate"), because the
paper's statistics are over all tasks of the suite.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelrl.errors import KernelRLError
from kernelrl.tasks.loader import Task

# origin_stage values that name a stage (a bare name among these is read as a stage, not a run)
STAGE_NAMES = ("seed", "augment", "sft", "selfsup", "crl", "optimize", "import", "baseline-vanilla",
               "baseline-evolve", "bench")
CODE_KEYS = ("code", "custom_code", "source", "kernel", "candidate", "optimized_code", "cuda_code")
TASK_KEYS = ("task_key", "task", "name", "task_name", "problem", "problem_name")


@dataclass
class Pick:
    """One kernel to report for a task (``source`` None: the source has nothing for this task)."""

    task: Task
    source: str | None
    variant: str = ""
    origin: str = ""  # origin_stage recorded for the candidate (seed, import, ... or the stored one)
    candidate_id: int | None = None
    rank: int = 0  # order within the task: rank 0 of every task is scored before any rank 1
    stored: dict[str, Any] | None = None  # the stored evaluation that selected it (store sources)
    note: str = ""


@dataclass
class ResolvedSource:
    label: str
    spec: str
    picks: list[Pick]
    unit: str = "task"  # task | kernel
    reduce: str = "best"  # best: keep the best-scored pick per task; none: every pick is a row
    notes: list[str] = field(default_factory=list)
    run_name: str | None = None
    missing: str = "no candidate"  # the reason shown for a task this source has nothing for
    provenance: dict[str, Any] = field(default_factory=dict)  # policy sources: checkpoint, prompt, pool, seeds


# -- task references -----------------------------------------------------------------------------------------
def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", s.lower())


class TaskIndex:
    """Finds a task of the suite from the many ways files and JSONs name one."""

    def __init__(self, tasks: list[Task]):
        self.tasks = tasks
        self.by: dict[str, Task] = {}
        self.by_num: dict[tuple[int, int], Task] = {}
        for t in tasks:
            short = t.name.split("_", 1)[-1] if re.match(r"^\d+_", t.name) else t.name
            for k in (t.key, t.name, f"level{t.level}/{t.name}", f"L{t.level}/{t.name}"):
                self.by.setdefault(k, t)
                self.by.setdefault(_norm(k), t)
            self.by.setdefault(_norm(short), t)
            m = re.match(r"^(\d+)_", t.name)
            if m:
                self.by_num.setdefault((t.level, int(m.group(1))), t)

    def find(self, ref: str | None = None, level: int | None = None, number: int | None = None) -> Task | None:
        if ref:
            ref = str(ref).strip()
            if ref.endswith(".py"):
                ref = ref[:-3]
            for k in (ref, _norm(ref), _norm(ref.rsplit("/", 1)[-1])):
                if k in self.by:
                    t = self.by[k]
                    if level is None or t.level == level:
                        return t
            m = re.match(r"^(\d+)_", ref.rsplit("/", 1)[-1])
            if m and level is not None:
                return self.by_num.get((level, int(m.group(1))))
        if level is not None and number is not None:
            return self.by_num.get((int(level), int(number)))
        return None


# -- file sources ----------------------------------------------------------------------------------------------
def from_directory(path: Path, tasks: list[Task]) -> tuple[list[Pick], list[str]]:
    index = TaskIndex(tasks)
    picks, notes, unmatched = [], [], []
    for f in sorted(path.rglob("*.py")):
        level = None
        m = re.fullmatch(r"level(\d+)", f.parent.name)
        if m:
            level = int(m.group(1))
        t = index.find(f.stem, level=level)
        if t is None:
            unmatched.append(f.name)
            continue
        try:
            code = f.read_text()
        except (OSError, UnicodeDecodeError) as e:
            notes.append(f"{f.name}: unreadable ({e})")
            continue
        picks.append(Pick(t, code, variant=f.name, origin="import"))
    if unmatched:
        notes.append(f"{len(unmatched)} files match no task of the suite: {', '.join(unmatched[:8])}"
                     + (" ..." if len(unmatched) > 8 else ""))
    if not picks:
        raise KernelRLError(f"{path}: no <task name>.py file matches a task of the suite")
    return picks, notes


def _records(data: Any) -> list[tuple[dict[str, Any] | None, str | None, str | None]]:
    """(record, task ref, code) triples from the accepted JSON shapes."""
    out = []
    if isinstance(data, dict):
        if any(k in data for k in ("kernels", "results", "items", "data")) and not any(isinstance(v, str)
                                                                                      for v in data.values()):
            for k in ("kernels", "results", "items", "data"):
                if k in data:
                    return _records(data[k])
        for ref, v in data.items():
            if isinstance(v, str):
                out.append((None, ref, v))
            elif isinstance(v, dict):
                out.append((v, v.get("task") or v.get("task_key") or ref, _code_of(v)))
        return out
    if isinstance(data, list):
        for v in data:
            if isinstance(v, dict):
                ref = next((str(v[k]) for k in TASK_KEYS if v.get(k)), None)
                out.append((v, ref, _code_of(v)))
        return out
    raise KernelRLError("expected a JSON object (task -> code) or a list of records")


def _code_of(rec: dict[str, Any]) -> str | None:
    for k in CODE_KEYS:
        if isinstance(rec.get(k), str) and rec[k].strip():
            return rec[k]
    return None


def from_json(path: Path, tasks: list[Task]) -> tuple[list[Pick], list[str]]:
    try:
        text = path.read_text()
        if path.suffix == ".jsonl":
            data: Any = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            data = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise KernelRLError(f"{path}: cannot read JSON ({str(e).splitlines()[0]})") from None
    try:
        records = _records(data)
    except KernelRLError as e:
        raise KernelRLError(f"{path}: {e}") from None
    index = TaskIndex(tasks)
    picks, unmatched, nocode = [], 0, 0
    seen: dict[str, int] = {}
    for rec, ref, code in records:
        level = number = None
        if rec is not None:
            lv = rec.get("level", rec.get("level_id"))
            num = rec.get("task_id", rec.get("problem_id"))
            level = int(lv) if isinstance(lv, (int, str)) and str(lv).isdigit() else None
            number = int(num) if isinstance(num, (int, str)) and str(num).isdigit() else None
        t = index.find(ref, level=level, number=number)
        if t is None:
            unmatched += 1
            continue
        if not code:
            nocode += 1
            continue
        seen[t.key] = seen.get(t.key, 0) + 1
        picks.append(Pick(t, code, variant=f"{path.name}#{seen[t.key]}", origin="import", rank=seen[t.key] - 1))
    notes = []
    if unmatched:
        notes.append(f"{unmatched} records match no task of the suite")
    if nocode:
        notes.append(f"{nocode} records have no code")
    if not picks:
        raise KernelRLError(f"{path}: no record matches a task of the suite")
    return picks, notes


# -- seeds -----------------------------------------------------------------------------------------------------
def from_seeds(tasks: list[Task], *, include_wrong: bool, device_kind: str) -> tuple[list[Pick], list[str]]:
    from kernelrl.tasks.seeds import load_seeds

    picks, notes = [], []
    skipped_gpu = 0
    for t in tasks:
        seeds = load_seeds(t)
        # seeds meant to be faster first, so a time-bounded run scores the promising ones of every task first
        order = {"faster": 0, "slower": 1, "wrong": 2}
        seeds = sorted(seeds, key=lambda s: (order.get(s.expect, 3), s.name))
        rank = 0
        for s in seeds:
            if s.expect == "wrong" and not include_wrong:
                continue
            if s.device == "cuda" and device_kind == "cpu":
                skipped_gpu += 1
                continue
            picks.append(Pick(t, s.source, variant=s.name, origin="seed", rank=rank,
                              note=f"expect {s.expect}; device {s.device}"))
            rank += 1
    if skipped_gpu:
        notes.append(f"{skipped_gpu} CUDA/Triton seeds skipped: the device is a CPU")
    if not include_wrong:
        notes.append("seeds marked 'expect: wrong' are not scored (seeds:all scores them)")
    return picks, notes


# -- the store -------------------------------------------------------------------------------------------------
def best_from_store(store, task_keys: list[str], *, run: str | None = None, stages: list[str] | None = None,
                    purpose: str | None = None, device_type: str | None = None, top_k: int = 1,
                    successful_only: bool = True) -> dict[str, list[dict[str, Any]]]:
    """Per task key, up to ``top_k`` candidates by their latest evaluation's speedup (best first).

    Each item: ``candidate_id, source, origin_stage, run_name, evaluation`` (the row's ``result`` dict plus
    ``evaluation_id``, ``purpose``, ``device_type``, ``settings``). ``purpose`` / ``device_type`` restrict which
    evaluations count; ``run`` / ``stages`` which candidates: those the run's stages produced (the
    ``candidate_runs`` links, so a kernel several runs produced counts for each); ``stages`` without a run: the
    stages of any run, and candidates whose first producer was such a stage (seeds, imports).
    """
    from sqlalchemy import func, or_, select

    from kernelrl.store.models import CandidateRow, CandidateRunRow, EvaluationRow, TaskRow

    with store.session() as s:
        latest = (select(EvaluationRow.candidate_id, func.max(EvaluationRow.id).label("eid"))
                  .join(CandidateRow, CandidateRow.id == EvaluationRow.candidate_id)
                  .join(TaskRow, TaskRow.id == CandidateRow.task_id)
                  .where(TaskRow.key.in_(task_keys)))
        if purpose:
            latest = latest.where(EvaluationRow.purpose == purpose)
        if device_type:
            latest = latest.where(EvaluationRow.device_type == device_type)
        if run:
            linked = select(CandidateRunRow.candidate_id).where(CandidateRunRow.run_name == run)
            if stages:
                linked = linked.where(CandidateRunRow.stage.in_(stages))
            latest = latest.where(CandidateRow.id.in_(linked))
        elif stages:
            linked = select(CandidateRunRow.candidate_id).where(CandidateRunRow.stage.in_(stages))
            latest = latest.where(or_(CandidateRow.origin_stage.in_(stages), CandidateRow.id.in_(linked)))
        latest = latest.group_by(EvaluationRow.candidate_id).subquery()
        q = (select(TaskRow.key, CandidateRow, EvaluationRow)
             .join(CandidateRow, CandidateRow.task_id == TaskRow.id)
             .join(latest, latest.c.candidate_id == CandidateRow.id)
             .join(EvaluationRow, EvaluationRow.id == latest.c.eid))
        out: dict[str, list[dict[str, Any]]] = {}
        for key, cand, ev in s.execute(q).all():
            ok = bool(ev.executable and ev.correct and (ev.speedup or 0) > 0)
            if successful_only and not ok:
                continue
            result = dict(ev.result or {})
            result.update(executable=ev.executable, correct=ev.correct, speedup=ev.speedup, flags=ev.flags,
                          error=ev.error, device_type=ev.device_type, evaluator_version=ev.evaluator_version,
                          candidate_id=cand.id, evaluation_id=ev.id)
            out.setdefault(key, []).append({
                "candidate_id": cand.id, "source": cand.source, "origin_stage": cand.origin_stage,
                "run_name": cand.run_name, "success": ok,
                "evaluation": dict(result, purpose=ev.purpose, settings=ev.settings or {}),
            })
    for key in out:
        out[key].sort(key=lambda c: (not c["success"], -(c["evaluation"].get("speedup") or 0), c["candidate_id"]))
        out[key] = out[key][:top_k]
    return out


def _run_exists(store, name: str) -> bool:
    from sqlalchemy import select

    from kernelrl.store.models import CandidateRunRow, RunRow

    with store.session() as s:
        return (s.scalar(select(RunRow.id).where(RunRow.name == name)) is not None
                or s.scalar(select(CandidateRunRow.id).where(CandidateRunRow.run_name == name).limit(1)) is not None)


def parse_store_spec(spec: str, run: str | None, store) -> tuple[str | None, list[str] | None, str]:
    """(run, stages, label) for a store spec; KernelRLError when it names nothing in the store."""
    if spec.startswith("run:"):
        name = spec[4:]
        if not _run_exists(store, name):
            raise KernelRLError(f"--source {spec}: no run {name!r} in the store")
        return name, None, name
    if spec.startswith("stage:"):
        stages = spec[6:].split("+")
        return run, stages, (f"{run}/" if run else "") + "+".join(stages)
    if "/" in spec:
        name, _, st = spec.partition("/")
        if not _run_exists(store, name):
            raise KernelRLError(f"--source {spec}: no run {name!r} in the store (and no such path)")
        return name, [x for x in st.split("+") if x], spec
    if all(x in STAGE_NAMES for x in spec.split("+")):
        return run, spec.split("+"), (f"{run}/" if run else "") + spec
    if _run_exists(store, spec):
        return spec, None, spec
    raise KernelRLError(f"--source {spec!r}: not 'seeds', a directory, a .json file, a stage "
                        f"({', '.join(STAGE_NAMES)}) or a run in the store")


def from_store(store, tasks: list[Task], run: str | None, stages: list[str] | None, top_k: int = 1,
               purpose: str | None = None, device_type: str | None = None) -> tuple[list[Pick], list[str]]:
    by_key = {t.key: t for t in tasks}
    found = best_from_store(store, list(by_key), run=run, stages=stages, top_k=top_k, purpose=purpose,
                            device_type=device_type)
    picks = []
    for key, cands in found.items():
        for i, c in enumerate(cands):
            picks.append(Pick(by_key[key], c["source"], variant=f"candidate {c['candidate_id']}",
                              origin=c["origin_stage"], candidate_id=c["candidate_id"], rank=i,
                              stored=c["evaluation"]))
    notes = [f"{len(found)}/{len(tasks)} tasks have a successful candidate in the store"]
    return picks, notes


# -- dispatch --------------------------------------------------------------------------------------------------
def resolve(spec: str, tasks: list[Task], *, store=None, run: str | None = None, top_k: int = 1,
            device_kind: str = "cpu", label: str | None = None, purpose: str | None = None,
            device_type: str | None = None) -> ResolvedSource:
    """Turn a ``--source`` spec into the kernels to score (``purpose``/``device_type``: which stored scores
    select a store source's candidates; None = any)."""
    if not tasks:
        raise KernelRLError("no tasks selected (check --suite and --levels)")
    if spec in ("seeds", "seeds:all"):
        include_all = spec == "seeds:all"
        picks, notes = from_seeds(tasks, include_wrong=include_all, device_kind=device_kind)
        if not picks:
            raise KernelRLError("the selected tasks have no seeds this device can run")
        return ResolvedSource(label or ("seed corpus (every kernel)" if include_all else "seed corpus (best per task)"),
                              spec, picks, unit="kernel" if include_all else "task",
                              reduce="none" if include_all else "best", notes=notes)
    if spec.startswith("baseline:"):
        from kernelrl.reports.reference_baselines import REFERENCE_BASELINES, from_reference_baseline

        if spec not in REFERENCE_BASELINES:
            raise KernelRLError(f"--source {spec}: unknown baseline; one of {', '.join(REFERENCE_BASELINES)}")
        picks, notes = from_reference_baseline(spec, tasks, device_kind=device_kind)
        return ResolvedSource(label or REFERENCE_BASELINES[spec][0], spec, picks, notes=notes,
                              missing="CUDA only" if device_kind == "cpu" else "no candidate")
    p = Path(spec).expanduser()
    if p.is_dir():
        picks, notes = from_directory(p, tasks)
        return ResolvedSource(label or p.name, spec, picks, notes=notes)
    if p.suffix in (".json", ".jsonl"):
        if not p.is_file():
            raise KernelRLError(f"--source {spec}: no such file")
        picks, notes = from_json(p, tasks)
        return ResolvedSource(label or p.stem, spec, picks, notes=notes)
    if store is None:
        raise KernelRLError(f"--source {spec}: needs the store")
    run_name, stages, default_label = parse_store_spec(spec, run, store)
    picks, notes = from_store(store, tasks, run_name, stages, top_k=top_k, purpose=purpose, device_type=device_type)
    if top_k > 1:
        notes.append(f"the {top_k} best stored candidates per task re-scored; the best final score kept")
    return ResolvedSource(label or default_label, spec, picks, notes=notes, run_name=run_name,
                          missing="no successful candidate" + (f" with a stored {purpose} score" if purpose else ""))
