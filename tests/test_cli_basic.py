"""The foundation CLI, run as a real process: exit codes, one-line errors, store and recipe commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def kernelrl(*args, env=None, cwd=None):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "kernelrl.cli", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=120)


def test_help_lists_every_group():
    r = kernelrl("--help")
    assert r.returncode == 0
    for group in ("tasks", "store", "checkpoints", "recipes", "eval", "optimize", "train", "pipeline", "bench"):
        assert group in r.stdout


def test_store_upgrade_and_stats(tmp_path):
    env = {"KERNELRL_HOME": str(tmp_path)}
    r = kernelrl("store", "upgrade", env=env)
    assert r.returncode == 0, r.stderr
    assert "revision" in r.stdout and (tmp_path / "store.db").exists()
    r = kernelrl("store", "stats", "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["tasks"] == 0


@pytest.mark.postgres
def test_store_upgrade_postgres(pg_url):
    r = kernelrl("store", "upgrade", "--store-url", pg_url.replace("postgresql+psycopg2://", "postgresql://"))
    assert r.returncode == 0, r.stderr


def test_user_errors_are_one_line_exit_2(tmp_path):
    r = kernelrl("tasks", "list", "--suite", str(tmp_path / "missing"))
    assert r.returncode == 2 and r.stderr.strip().startswith("error:") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = kernelrl("recipes", "show", "nope")
    assert r.returncode == 2 and "not found" in r.stderr and "Traceback" not in r.stderr
    r = kernelrl("store", "stats", env={"KERNELRL_STORE_URL": "postgresql://x:topsecret@127.0.0.1:1/db"})
    assert r.returncode == 2 and "topsecret" not in r.stderr + r.stdout and "Traceback" not in r.stderr


def test_tasks_list_describes_a_task_by_its_module_or_model_docstring(tmp_path):
    """Built-in tasks have a module docstring; KernelBench's problems document ``class Model`` instead (their list
    showed an empty description column). Piped, a long key is printed whole (rich cut it to fit 80 columns)."""
    level = tmp_path / "suite" / "level1"
    level.mkdir(parents=True)
    body = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    {doc}\n"
            "    def forward(self, x):\n        return x\n\ndef get_inputs():\n    return [torch.randn(2)]\n\n"
            "def get_init_inputs():\n    return []\n")
    (level / "1_Doubles.py").write_text(body.format(doc='"""Simple model that returns its input.\n\n    More."""'))
    (level / "2_Plain.py").write_text('"""Module words."""\n' + body.format(doc='"""Model words."""'))
    (level / "3_A_problem_whose_name_is_long_enough_that_an_80_column_table_would_cut_it.py").write_text(
        body.format(doc='"""Long."""'))
    r = kernelrl("tasks", "list", "--suite", str(tmp_path / "suite"))
    assert r.returncode == 0, r.stderr
    assert "kernelbench/L1/3_A_problem_whose_name_is_long_enough_that_an_80_column_table_would_cut_it" in r.stdout
    assert "Simple model that returns its input." in r.stdout and "More." not in r.stdout
    assert "Module words." in r.stdout and "Model words." not in r.stdout


def test_unknown_option_is_usage_error():
    r = kernelrl("tasks", "list", "--bogus")
    assert r.returncode == 2 and "No such option" in (r.stderr + r.stdout) and "Traceback" not in r.stderr


def test_recipes_commands():
    r = kernelrl("recipes", "list")
    assert r.returncode == 0 and "smoke" in r.stdout and "h100x8" in r.stdout
    r = kernelrl("recipes", "show", "smoke")
    assert r.returncode == 0 and "augment:" in r.stdout
