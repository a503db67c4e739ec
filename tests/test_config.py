"""Settings, stage dataclasses and recipes: defaults, overrides, and errors that name the field."""

from __future__ import annotations

import pytest

from kernelrl.config import load_recipe, list_recipes
from kernelrl.config.recipes import field_help
from kernelrl.config.settings import load_settings, redact_url
from kernelrl.errors import ConfigError


def test_named_recipes_load():
    assert {"smoke", "h100x8"} <= set(list_recipes())
    smoke = load_recipe("smoke")
    assert smoke.eval.device == "cpu" and smoke.augment.teachers == ["seed-corpus"]
    real = load_recipe("h100x8")
    assert real.crl.max_completion_length >= 4096 and real.accelerate["num_processes"] >= 2
    assert real.crl.sampler.n_exemplars == 2


def test_overrides_and_digest():
    a = load_recipe("smoke")
    b = load_recipe("smoke", {"sft.epochs": 1, "crl.sampler.kind": "random"})
    assert b.sft.epochs == 1.0 and b.crl.sampler.kind == "random"
    assert a.digest() != b.digest() and a.digest() == load_recipe("smoke").digest()


@pytest.mark.parametrize("overrides, field", [
    ({"sft.epochs": "three"}, "sft.epochs"),
    ({"crl.group_size": 1}, "crl.group_size"),
    ({"eval.device": "tpu"}, "eval.device"),
    ({"sft.bogus": 1}, "sft.bogus"),
    ({"eval.budget_s": -1}, "eval.budget_s"),
    ({"crl.use_vllm": "yes"}, "crl.use_vllm"),
])
def test_bad_recipe_values_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_recipe("smoke", overrides)


def test_bad_yaml_and_missing_recipe(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sft: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_recipe(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_recipe("no-such-recipe")


def test_settings_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELRL_HOME", str(tmp_path))
    monkeypatch.setenv("KERNELRL_GPU_IDS", "0, GPU-abc")
    monkeypatch.setenv("KERNELRL_STORE_URL", "postgresql://u:hunter2@127.0.0.1:5432/db")
    monkeypatch.setenv("KERNELRL_S3_SECRET_ACCESS_KEY", "s3cret")
    s = load_settings()
    assert s.gpu_ids == ["0", "GPU-abc"]
    assert s.resolved_store_url.startswith("postgresql+psycopg2://")
    red = s.redacted()
    assert "hunter2" not in str(red) and "s3cret" not in str(red)
    assert "s3cret" not in repr(s)


def test_bad_setting_names_the_variable(monkeypatch):
    monkeypatch.setenv("KERNELRL_STORE_URL", "mysql://x")
    with pytest.raises(ConfigError, match="KERNELRL_STORE_URL"):
        load_settings()


def test_default_store_is_sqlite_under_home(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELRL_HOME", str(tmp_path))
    monkeypatch.delenv("KERNELRL_STORE_URL", raising=False)
    s = load_settings()
    assert s.resolved_store_url == f"sqlite:///{tmp_path.resolve() / 'store.db'}"


def test_redact_url():
    assert redact_url("postgresql+psycopg2://a:b@h:1/d") == "postgresql+psycopg2://a:***@h:1/d"
    assert redact_url("sqlite:///x.db") == "sqlite:///x.db"


def test_every_knob_has_help():
    rows = field_help()
    assert len(rows) > 40
    missing = [name for name, _, help_ in rows if not help_]
    assert not missing, missing


def test_trackers_setting(monkeypatch):
    assert load_settings().report_to == ["tensorboard"]  # the default: event files, no account or server
    monkeypatch.setenv("KERNELRL_REPORT_TO", "tensorboard, WandB")
    assert load_settings().report_to == ["tensorboard", "wandb"]
    monkeypatch.setenv("KERNELRL_REPORT_TO", "none")
    assert load_settings().report_to == []
    monkeypatch.setenv("KERNELRL_REPORT_TO", "tb")
    with pytest.raises(ConfigError, match="KERNELRL_REPORT_TO.*unknown tracker 'tb'"):
        load_settings()
    from kernelrl.training.tracking import headline

    assert headline({"loss": 0.5, "reward": 1.25, "success_rate": 0.5, "grad_norm": 3.0, "learning_rate": 1e-3,
                     "evaluation_s": 2.04}) == "loss=0.5 reward=1.25 success=50% lr=0.001 eval_s=2.0"


def test_final_protocol_has_one_home(tmp_path):
    """The final evaluation's budget and trials live in the bench section only; the pipeline's bench step,
    `kernelrl bench --recipe` and `kernelrl ablate --recipe` all read them from there."""
    from kernelrl.reports.scoring import final_config

    r = load_recipe("h100x8")
    cfg = final_config(r.eval, bench=r.bench)
    assert (cfg.budget_s, cfg.correctness_trials) == (r.bench.budget_s, r.bench.correctness_trials) == (1200.0, 1000)
    assert final_config(r.eval, bench=r.bench, budget_s=5.0).budget_s == 5.0  # a flag wins
    assert not hasattr(r.eval, "final_budget_s")
    old = tmp_path / "old.yaml"
    old.write_text("eval:\n  final_budget_s: 600\n")
    with pytest.raises(ConfigError, match=r"eval\.final_budget_s moved to bench\.budget_s"):
        load_recipe(old)


def test_the_evaluator_has_at_most_20_public_knobs_each_with_its_why():
    """Issue 34: a user can tell which evaluation knobs matter. The rest are constants beside their code."""
    import dataclasses

    from kernelrl.config.stages import REMOVED_EVAL_KNOBS, EvalConfig

    fields = dataclasses.fields(EvalConfig)
    assert len(fields) <= 20, [f.name for f in fields]
    assert all(len(f.metadata.get("help", "")) > 20 for f in fields)
    assert not {f.name for f in fields} & set(REMOVED_EVAL_KNOBS)
    for name in ("device", "budget_s", "correctness_trials", "target_ci", "spread_threshold", "reverify",
                 "reverify_above", "min_rounds", "clock", "cuda_graphs"):
        assert name in {f.name for f in fields}


@pytest.mark.parametrize("key, removed, closest", [
    ("eval.spin_wait", True, "spread_threshold"),
    ("eval.held_wall_ratio", True, "max_wall_s"),
    ("eval.budget", False, "budget_s"),
    ("eval.target_cii", False, "target_ci"),
])
def test_an_unknown_or_removed_eval_knob_is_one_line_naming_the_closest_public_one(key, removed, closest):
    with pytest.raises(ConfigError) as e:
        load_recipe("smoke", {key: 1})
    msg = str(e.value)
    assert "\n" not in msg and key.split(".")[1] in msg and f"closest: {closest}" in msg, msg
    assert ("no longer a knob" in msg) is removed, msg


def test_a_removed_knob_in_an_old_jobs_settings_is_ignored():
    """A job queued by an older version carries every knob it had then: its worker reads it without them."""
    import dataclasses

    from kernelrl.config.stages import EvalConfig
    from kernelrl.evaluation.jobworker import config_from_settings

    old = {**dataclasses.asdict(EvalConfig(budget_s=0.7)), "spin_wait": True, "heat_ms": 0.0, "estimator": "hl",
           "keep_rounds": False, "spans_per_block": 2}
    cfg = config_from_settings(old, "cpu")
    assert cfg.budget_s == 0.7 and cfg.device == "cpu"
