"""The seed corpus: every built-in task has faster/slower/wrong seeds, >= 10 tasks have a GPU seed, headers
parse, and every CPU-runnable seed's correct/wrong claim holds on CPU (a small claim checker, not the hardened
evaluator: the files are exec'd in this process)."""

from __future__ import annotations

import ast

import pytest
import torch

from kernelrl.errors import TaskFormatError
from kernelrl.tasks import Task, load_suite
from kernelrl.tasks.seeds import EXPECTS, Seed, all_seeds, load_seeds

TASKS = load_suite("builtin")
TASK_BY_KEY = {t.key: t for t in TASKS}
SEEDS = all_seeds(TASKS)
CPU_SEEDS = [s for s in SEEDS if s.device == "any"]


def _exec(source: str, name: str, path=None) -> dict:
    filename = str(path) if path else name  # a real file name: Triton's @jit reads its source back from it
    ns: dict = {"__name__": name, "__file__": filename}
    exec(compile(source, filename, "exec"), ns)  # noqa: S102 - our own files
    return ns


def _flat(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in _flat(o)]


def _mismatch(got, ref) -> str | None:
    """None when got matches ref: allclose (rtol 1e-4, atol 1e-4 x max(1, max|ref|)) and relative L2 error <= 1e-4."""
    a, b = _flat(got), _flat(ref)
    if len(a) != len(b):
        return f"{len(a)} outputs vs {len(b)}"
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return f"shape {tuple(x.shape)} vs {tuple(y.shape)}"
        x, y = x.detach().double(), y.detach().double()
        scale = max(1.0, y.abs().max().item()) if y.numel() else 1.0
        if not torch.allclose(x, y, rtol=1e-4, atol=1e-4 * scale):
            return f"max abs err {(x - y).abs().max().item():.3g}"
        rel = ((x - y).norm() / y.norm().clamp_min(1e-12)).item()
        if rel > 1e-4:
            return f"relative L2 error {rel:.3g}"
    return None


def test_every_task_has_the_three_kinds():
    by_task: dict[str, list[Seed]] = {}
    for s in SEEDS:
        by_task.setdefault(s.task_key, []).append(s)
    for t in TASKS:
        seeds = by_task.get(t.key, [])
        assert len(seeds) >= 3, f"{t.key}: {len(seeds)} seeds"
        kinds = {s.expect for s in seeds if s.device == "any"}
        assert kinds >= set(EXPECTS), f"{t.key}: CPU seeds cover only {sorted(kinds)}"


def test_gpu_seeds_on_at_least_ten_tasks():
    gpu_tasks = {s.task_key for s in SEEDS if s.device == "cuda"}
    assert len(gpu_tasks) >= 10, sorted(gpu_tasks)
    for s in SEEDS:
        if s.device != "cuda":
            continue
        src = s.source
        if "custom-cuda" in s.techniques:
            assert "load_inline" in src and "__global__" in src, s.path
            assert "C10_CUDA_KERNEL_LAUNCH_CHECK" in src, f"{s.path}: check the launch"
        else:
            assert "triton" in s.techniques and "@triton.jit" in src and "import triton.language as tl" in src, s.path
        assert "except" not in src, f"{s.path}: no silent fallbacks"


@pytest.mark.parametrize("seed", SEEDS, ids=[f"{s.task_key}/{s.name}" for s in SEEDS])
def test_seed_file_shape(seed):
    tree = ast.parse(seed.source)
    top = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    assert "ModelNew" in top
    assert not ({"Model", "get_inputs", "get_init_inputs"} & (top | assigned)), "a seed redefines nothing of the task"
    assert "get_inputs" not in seed.source
    assert seed.why and seed.techniques and seed.expect in EXPECTS
    assert seed.path.parent.name == TASK_BY_KEY[seed.task_key].name
    # same constructor signature as the task's Model
    task_tree = ast.parse(TASK_BY_KEY[seed.task_key].source)

    def init_args(t, cls):
        c = next(n for n in t.body if isinstance(n, ast.ClassDef) and n.name == cls)
        f = next(n for n in c.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        return [a.arg for a in f.args.args], len(f.args.defaults)

    assert init_args(tree, "ModelNew") == init_args(task_tree, "Model")


@pytest.mark.parametrize("seed", CPU_SEEDS, ids=[f"{s.task_key}/{s.name}" for s in CPU_SEEDS])
def test_cpu_claim(seed):
    task = TASK_BY_KEY[seed.task_key]
    task_ns = _exec(task.source, f"task_{task.name}", task.path)
    seed_ns = _exec(seed.source, f"seed_{seed.name}", seed.path)
    init = task_ns["get_init_inputs"]()
    torch.manual_seed(0)
    ref = task_ns["Model"](*init)
    torch.manual_seed(0)
    new = seed_ns["ModelNew"](*init)
    own = new.state_dict()
    new.load_state_dict({k: v for k, v in ref.state_dict().items() if k in own and own[k].shape == v.shape},
                        strict=False)
    reasons = []
    with torch.no_grad():
        for i in range(3):
            torch.manual_seed(100 + i)
            inputs = task_ns["get_inputs"]()
            expected = ref(*[t.clone() for t in inputs])
            got = new(*[t.clone() for t in inputs])
            reasons.append(_mismatch(got, expected))
    if seed.expect == "wrong":
        assert any(reasons), f"{seed.path}: claims wrong but matches the reference on 3 input sets"
    else:
        bad = [r for r in reasons if r]
        assert not bad, f"{seed.path}: claims correct but {bad[0]}"


def _fake_task(tmp_path) -> Task:
    return Task(key="builtin/L1/99_Fake", name="99_Fake", level=1, suite="builtin", source="")


GOOD = "# kernelrl-seed\n# expect: faster\n# device: any\n# technique: algebraic\n# why: demo\nclass ModelNew: pass\n"


@pytest.mark.parametrize(
    "text, needle",
    [
        (GOOD.replace("# kernelrl-seed\n", ""), "kernelrl-seed"),
        (GOOD.replace("faster", "quicker"), "expect"),
        (GOOD.replace("device: any", "device: tpu"), "device"),
        (GOOD.replace("# technique: algebraic", "# technique: ,"), "technique"),
        (GOOD.replace("# why: demo\n", ""), "why"),
        (GOOD.replace("class ModelNew: pass", "class Model: pass"), "ModelNew"),
    ],
)
def test_malformed_header_names_the_file(tmp_path, text, needle):
    d = tmp_path / "level1" / "99_Fake"
    d.mkdir(parents=True)
    (d / "bad_seed.py").write_text(text)
    with pytest.raises(TaskFormatError) as e:
        load_seeds(_fake_task(tmp_path), root=tmp_path)
    msg = str(e.value)
    assert "bad_seed.py" in msg and needle in msg and "\n" not in msg


def test_good_header_parses_and_missing_dir_is_empty(tmp_path):
    d = tmp_path / "level1" / "99_Fake"
    d.mkdir(parents=True)
    (d / "ok.py").write_text(GOOD.replace("algebraic", "algebraic, fusion"))
    (s,) = load_seeds(_fake_task(tmp_path), root=tmp_path)
    assert (s.name, s.expect, s.device, s.techniques, s.why) == ("ok", "faster", "any", ("algebraic", "fusion"), "demo")
    assert s.task_key == "builtin/L1/99_Fake"
    other = Task(key="kernelbench/L1/1_X", name="1_X", level=1, suite="kernelbench", source="")
    assert load_seeds(other, root=tmp_path) == []
