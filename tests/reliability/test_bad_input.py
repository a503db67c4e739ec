"""Bad input, end to end through real processes: the ``kernelrl`` console script and ``python -m steps.<stage>``
given malformed task files, a task whose reference itself fails, empty suites, recipes with wrong types, unknown
options, a store that cannot be reached, a missing candidate. Each must exit 2 with one ``error:`` line on stderr
that names the problem (the file, field or option), and no traceback anywhere. (Single cases also live in
tests/test_cli_basic.py, test_config.py, test_tasks_loader.py, test_optimize.py; this file sweeps them all.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_SCRIPT = Path(sys.executable).with_name("kernelrl")
KERNELRL = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "kernelrl.cli"]
DOWN_STORE = "postgresql+psycopg2://postgres@127.0.0.1:1/x"  # nothing listens on port 1

GOOD_TASK = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.randn(8, 8)]
def get_init_inputs():
    return []
"""
FILES = {
    "syntax.py": "import torch\nclass Model(torch.nn.Module:\n    pass\n",
    "no_model.py": "import torch\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n",
    "no_inputs.py": "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
                    "def get_init_inputs():\n    return []\n",
    "good.py": GOOD_TASK,
    "ref_forward_raises.py": GOOD_TASK.replace("return x * 2", "raise RuntimeError('reference is broken')"),
    "ref_inputs_raise.py": GOOD_TASK.replace("return [torch.randn(8, 8)]", "raise ValueError('inputs are broken')"),
    "cand.py": "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n",
    "bad_yaml.yaml": "suite: [1\n  levels: : :\n",
    "list.yaml": "- suite\n- levels\n",
    "wrong_type.yaml": "suite: builtin\nsft:\n  epochs: three\n",
}
TASK_ERRORS = {  # file -> what the one line must say
    "syntax.py": "not valid Python (line 2",
    "no_model.py": "missing Model",
    "no_inputs.py": "missing get_inputs",
}


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad-input")
    for name, text in FILES.items():
        (root / name).write_text(text)
    (root / "latin1.py").write_bytes(b"# \xff\xfe caf\xe9\nclass Model: pass\n")
    (root / "empty").mkdir()
    (root / "kb" / "KernelBench" / "level1").mkdir(parents=True)  # a checkout with no task files
    (root / "kb" / "KernelBench" / "level1" / "README.md").write_text("no tasks here\n")
    (root / "a-file").write_text("not a directory\n")
    return root


def _env(d: Path, **extra: str | None) -> dict:
    env = dict(os.environ, KERNELRL_HOME=str(d / "home"), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(ROOT), KERNELRL_LOG_LEVEL="WARNING", COLUMNS="200",
               NO_COLOR="1")
    for var in ("KERNELRL_STORE_URL", "KERNELRL_CHECKPOINT_URI", "KERNELRL_RECIPES_DIR"):
        env.pop(var, None)
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def _run(cmd: list[str], d: Path, timeout: float = 120, **env: str | None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=_env(d, **env), timeout=timeout)


def kernelrl(d: Path, *args: str, **env: str | None) -> subprocess.CompletedProcess:
    return _run([*KERNELRL, *args], d, **env)


def step(d: Path, stage: str, *args: str, **env: str | None) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", f"steps.{stage}", *args], d, **env)


_ERROR_LINE = re.compile(r"(^|: )error: ")


def user_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, no traceback, exactly one ``error:`` line, the last thing on stderr, naming every needle."""
    out = r.stdout + r.stderr
    assert "Traceback" not in out, out[-4000:]
    assert r.returncode == 2, f"exit {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}"
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if _ERROR_LINE.search(ln)]
    assert len(errors) == 1 and lines[-1] == errors[0], r.stderr[-3000:]
    for n in needles:
        assert n in errors[0], f"{n!r} not in {errors[0]!r}"
    return errors[0]


def usage_error(r: subprocess.CompletedProcess, message: str) -> None:
    """A command-line usage error (click's or argparse's): exit 2, no traceback, the message on one line."""
    out = r.stdout + r.stderr
    assert "Traceback" not in out, out[-4000:]
    assert r.returncode == 2, f"exit {r.returncode}\n{out[-3000:]}"
    assert any(message in ln for ln in r.stderr.splitlines()), r.stderr[-3000:]


# -- task files -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(TASK_ERRORS))
def test_malformed_task_file_in_cli_and_step(d, name):
    from kernelrl.store import Store

    path = str(d / name)
    user_error(kernelrl(d, "tasks", "show", path), path, TASK_ERRORS[name])
    user_error(kernelrl(d, "eval", path, str(d / "cand.py"), "--device", "cpu"), path, TASK_ERRORS[name])
    user_error(step(d, "augment", "--run", f"bad-{name}", "--set", f"suite={path}"), path, TASK_ERRORS[name])
    # the stage record says what went wrong: the flow and ``kernelrl pipeline status`` see it
    st = Store(f"sqlite:///{d / 'home' / 'store.db'}")
    try:
        rec = st.stage_record(f"bad-{name}", "augment")
    finally:
        st.engine.dispose()
    assert rec["status"] == "failed" and TASK_ERRORS[name] in rec["error"]


def test_undecodable_or_missing_task_file(d):
    user_error(kernelrl(d, "tasks", "show", str(d / "latin1.py")), str(d / "latin1.py"), "cannot read")
    missing = str(d / "nope.py")
    user_error(kernelrl(d, "tasks", "show", missing), missing, "not found")
    user_error(kernelrl(d, "eval", missing, str(d / "cand.py")), missing, "not found")


def test_missing_candidate_file(d):
    cand = str(d / "no-such-candidate.py")
    user_error(kernelrl(d, "eval", str(d / "good.py"), cand, "--device", "cpu"), cand, "no such candidate file")


@pytest.mark.parametrize("task, json_out, needles", [
    ("ref_forward_raises.py", True, ("reference failed", "RuntimeError: reference is broken")),
    ("ref_inputs_raise.py", False, ("reference failed", "ValueError: inputs are broken")),
], ids=["forward-raises-json", "get_inputs-raises-text"])
def test_reference_that_fails_is_a_user_error_not_the_candidates(d, task, json_out, needles):
    """The candidate is fine; the task's own reference raises. The evaluation must not report a verdict on the
    candidate (no 'correct: False'), but say the reference failed and exit 2."""
    args = ["eval", str(d / task), str(d / "cand.py"), "--device", "cpu", "--budget-s", "0.1",
            "--correctness-trials", "1", *(["--json"] if json_out else [])]
    r = kernelrl(d, *args)
    user_error(r, *needles)
    assert "correct" not in r.stdout and "speedup" not in r.stdout, r.stdout[-2000:]


# -- suites -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("suite, needle", [
    ("empty", "no level1/ .. level4/ folders"),
    ("kb", "the suite is empty"),
    ("does-not-exist", "not 'builtin', a task file or a KernelBench directory"),
])
def test_empty_or_missing_suite(d, suite, needle):
    path = str(d / suite)
    user_error(kernelrl(d, "tasks", "list", "--suite", path), path, needle)
    if suite != "does-not-exist":  # (the step reads the suite through the same loader)
        user_error(step(d, "augment", "--run", f"suite-{suite}", "--set", f"suite={path}"), path, needle)


def test_a_stage_run_out_of_order_says_so_before_torch_loads(d):
    """crl before selfsup: one line naming the missing stage, given before the body's module (torch, trl) is
    imported (kernelrl.step.STAGE_NEEDS; it took 5.3 s to say so before)."""
    user_error(step(d, "crl", "--recipe", "smoke", "--run", "out-of-order"), "stage 'selfsup' has not finished")
    probe = ("import sys\nfrom kernelrl.step import run_step, stage_body\n"
             "rc = run_step('crl', stage_body('crl'), ['--recipe', 'smoke', '--run', 'out-of-order'])\n"
             "print(rc, 'torch' in sys.modules)\n")
    r = _run([sys.executable, "-c", probe], d)
    assert r.stdout.split() == ["2", "False"], (r.stdout, r.stderr[-2000:])


def test_levels_that_select_no_task(d):
    """levels the builtin suite does not have: the stage has nothing to do, which is bad input, not a done stage."""
    user_error(step(d, "augment", "--run", "no-levels", "--set", "levels=[9]"), "no tasks", "levels [9]")
    user_error(kernelrl(d, "tasks", "list", "--levels", "9"), "no task at levels 9", "it has levels 1,2,3")


# -- recipes ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sets, needles", [
    (["sft.epochs=x"], ("sft.epochs", "expected float", "'x'")),
    (["sft.epochs=-1"], ("sft.epochs", "must be > 0")),
    (["augment.max_retries=-1"], ("augment.max_retries", "must be >= 0")),
    (["nosuch=1"], ("nosuch", "unknown field")),
    (["sft.nosuch=1"], ("sft.nosuch", "unknown field")),
    (["eval.device=gpu"], ("eval.device", "'gpu'")),
    (["eval.clock=host"], ("eval.clock", "'held' only", "'host'")),
    (["eval.clock=device"], ("eval.clock", "'held' only", "'device'")),
    (["levels=[1"], ("--set 'levels=[1'", "not valid YAML")),
    (["noequals"], ("--set 'noequals'", "expected key=value")),
    (["=1"], ("--set '=1'", "expected key=value")),
    (["sft=3", "sft.epochs=1"], ("sft.epochs", "sft is 3, not a mapping")),
    (["model.name_or_path.x=1"], ("model.name_or_path.x", "not a mapping")),
], ids=lambda v: "+".join(v) if isinstance(v, list) else "")
def test_recipe_overrides_with_wrong_types_or_keys(d, sets, needles):
    args = ["--run", "bad-recipe", "--dry-run", *[a for s in sets for a in ("--set", s)]]
    user_error(step(d, "augment", *args), *needles)
    if sets == ["levels=[1"] or sets == ["sft=3", "sft.epochs=1"]:  # the same through kernelrl train / pipeline
        user_error(kernelrl(d, "train", "sft", *args), *needles)
        user_error(kernelrl(d, "pipeline", "run", *[a for a in args if a != "--dry-run"]), *needles)


@pytest.mark.parametrize("recipe, needles", [
    ("bad_yaml.yaml", ("invalid YAML",)),
    ("list.yaml", ("top level must be a mapping",)),
    ("wrong_type.yaml", ("sft.epochs", "expected float", "'three'")),
    ("missing.yaml", ("not found",)),
])
def test_bad_recipe_files(d, recipe, needles):
    path = str(d / recipe)
    user_error(kernelrl(d, "recipes", "show", path), path if recipe != "wrong_type.yaml" else "wrong_type", *needles)
    user_error(step(d, "crl", "--recipe", path, "--run", "bad-recipe-file", "--dry-run"), *needles)


# -- command lines ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--bogus"], "No such option: --bogus"),
    (["nosuchcmd"], "No such command 'nosuchcmd'"),
    (["tasks", "list", "--bogus"], "No such option: --bogus"),
    (["eval", "--frobnicate", "a.py", "b.py"], "No such option: --frobnicate"),
    (["train", "augment", "--run", "r", "--bogus"], "No such option: --bogus"),
    (["store", "stats", "--nope"], "No such option: --nope"),
    (["eval", "only-one-arg.py"], "Missing argument"),
])
def test_unknown_kernelrl_options(d, args, message):
    usage_error(kernelrl(d, *args), message)


def test_kernelrl_bad_option_values(d):
    user_error(kernelrl(d, "tasks", "list", "--levels", "x"), "--levels", "'x'")
    user_error(kernelrl(d, "train", "nosuchstage", "--run", "r"), "nosuchstage")


@pytest.mark.parametrize("stage, args, message", [
    ("augment", ["--run", "r", "--bogus"], "unrecognized arguments: --bogus"),
    ("sft", ["--run", "r", "--epochs", "3"], "unrecognized arguments: --epochs 3"),
    ("bench", [], "the following arguments are required: --run"),
])
def test_unknown_step_options(d, stage, args, message):
    r = step(d, stage, *args)
    usage_error(r, message)
    assert r.stderr.strip().splitlines()[-1].endswith(f"error: {message}")


# -- the store --------------------------------------------------------------------------------------------------
def test_store_that_cannot_be_reached(d):
    for r in (kernelrl(d, "store", "stats", KERNELRL_STORE_URL=DOWN_STORE),
              kernelrl(d, "pipeline", "status", "--run", "r", KERNELRL_STORE_URL=DOWN_STORE),
              step(d, "augment", "--run", "r", "--dry-run", KERNELRL_STORE_URL=DOWN_STORE)):
        user_error(r, "127.0.0.1:1/x", "cannot connect")


def test_store_url_or_home_that_is_unusable(d):
    user_error(kernelrl(d, "store", "stats", KERNELRL_STORE_URL="mysql://h/db"), "KERNELRL_STORE_URL")
    home = str(d / "a-file" / "home")  # under a regular file: cannot be created
    user_error(kernelrl(d, "store", "stats", KERNELRL_HOME=home), home, "cannot create")
    user_error(step(d, "augment", "--run", "r", "--dry-run", KERNELRL_HOME=home), home, "cannot create")
