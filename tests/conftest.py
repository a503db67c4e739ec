"""Shared fixtures: offline single-threaded env, a fresh Postgres database per session, store URLs.

- ``pg_url``: a database created for this test session on the real Postgres at 127.0.0.1:5432 (trust auth)
  and dropped at the end, so several test runs can share the server.
- ``store_url``: parametrised over SQLite (a temp file) and Postgres; each test gets a clean, migrated store.
- ``s3_server`` / ``s3_bucket``: moto's real S3 HTTP server on loopback (tests/fixtures_s3.py).
"""

from __future__ import annotations

import os
import uuid

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

PG_ADMIN = os.environ.get("KERNELRL_TEST_PG", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")

try:
    from tests.fixtures_s3 import *  # noqa: F401,F403  (the S3 fixtures: moto on loopback)
except ImportError as _e:  # the GPU host (bench/gpu_session.sh runs the CUDA red team there) has no boto3/moto
    if "boto" not in str(_e) and "moto" not in str(_e):
        raise


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# Long end-to-end tests that run in ``make test-slow`` (part of .ci/run, so CI still runs every one) to keep
# ``make test`` within its 12 minutes of pytest on the 2-core CI machine: at b6dd257 the fast suite took 20 min; these
# took 9.4 min of it (durations measured there, 2026-11-27). Each is an end-to-end path whose parts have faster
# tests in the fast suite (the stage bodies, the runner, the queue, the evaluator).
SLOW_IN_MAKE_TEST = {
    "tests/test_training_steps.py::test_the_sft_seed_knob_changes_the_data_order",  # 40 s: three sft steps
    "tests/test_training_steps.py::test_all_stages_end_to_end[postgres]",  # 85 s
    "tests/reliability/test_stage_kills.py::test_augment_killed_mid_evaluation_resumes[postgres]",  # 68 s
    "tests/reliability/test_secrets.py::test_planted_secrets_never_leak",  # 53 s with its Prefect server
    "tests/reliability/test_stage_kills.py::test_selfsup_killed_after_first_iteration_resumes",  # 31 s
    "tests/test_flows.py::test_end_to_end_then_skip_then_from_then_changed_inputs",  # 37 s with set-up
    "tests/test_flows.py::test_stage_flow_and_cli",  # 23 s
    "tests/test_training_steps.py::test_killed_step_resumes_from_its_checkpoint[crl-postgres]",  # 22 s
    "tests/test_training_steps.py::test_killed_step_resumes_from_its_checkpoint[sft-postgres]",  # 20 s
    "tests/test_crl_ablations.py::test_evolve_baseline_uses_islands_and_up_to_4_exemplars",  # 22 s
    "tests/test_evaluator.py::test_identical_candidate_is_not_dragged_down_by_its_first_blocks",  # 17 s
    "tests/test_cli_second_hour.py::test_bench_reuse_is_labelled_and_a_forced_bench_measures_again",  # 17 s
    "tests/test_cli_edges.py::test_candidate_errors_name_the_candidate_not_the_harness",  # 13 s
    "tests/test_optimize.py::test_optimize_over_http_evaluates_and_builds_contrastive_prompts",  # 13 s
    "tests/test_flows.py::test_real_bench_step_on_fake_upstream",  # 12 s
    "tests/test_cli_second_hour.py::test_bench_estimates_reports_progress_and_leaves_a_partial_report",  # 12 s
    "tests/reliability/test_llm_faults.py::test_augment_step_survives_every_kind_of_bad_response[postgres]",  # 17 s
    "tests/test_worker.py::test_four_worker_processes_drain_200_jobs_postgres",  # 11 s
    "tests/test_flows.py::test_failure_stops_the_pipeline_and_the_next_run_resumes_there",  # 11 s
    "tests/test_cli_edges.py::test_devices_this_machine_lacks_are_usage_errors",  # 10 s
    "tests/test_compile_cache_lock.py::"
    "test_a_re_measurement_takes_the_cache_after_the_first_measurements_workers_let_it_go",  # 10 s
    "tests/test_flows.py::test_failed_stage_is_retried_and_earlier_stages_are_not_rerun",  # 9 s
    "tests/test_cli_second_hour.py::test_a_loop_at_import_time_fails_fast",  # 9 s
    "tests/test_worker_service.py::test_real_evaluator_through_the_service",  # 9 s
    # at 5239afb the rest took 12.0 min: these 38 s more leave a margin for the machine's noise
    "tests/test_worker.py::test_sigkilled_worker_job_is_finished_by_another[sqlite]",  # 9 s (postgres stays)
    "tests/test_worker.py::test_one_worker_process_drains_200_jobs_sqlite",  # 8 s
    "tests/test_cli_second_hour.py::test_eval_progress_goes_to_stderr",  # 7 s
    "tests/test_cli_second_hour.py::test_optimize_with_an_unusable_model_fails_before_any_table",  # 7 s
    "tests/test_flows.py::test_killed_stage_is_retried",  # 7 s
    # at 21ccded make test took 13.1 min of pytest on a fresh clone (876 passed): these ~90 s more (durations
    # measured under a concurrent test-slow run, about 1.5x; the Postgres twins and the red team stay)
    "tests/reliability/test_secrets.py::test_workers_up_keeps_the_store_password_off_worker_command_lines",  # 30 s
    "tests/test_eval_memory.py::test_reference_worker_stays_within_the_block_budget",  # 22 s
    "tests/test_bench.py::test_step_dry_run_and_a_run_without_candidates",  # 17 s
    "tests/test_crl_ablations.py::test_islands_are_assigned_advanced_and_migrate_in_crl[sqlite]",  # 16 s
    "tests/test_eval_memory.py::test_huge_sets_get_fewer_spans_per_block",  # 16 s
    "tests/reliability/test_bad_input.py::test_recipe_overrides_with_wrong_types_or_keys[sft=3+sft.epochs=1-]",  # 15
    "tests/test_compile_cache_lock.py::"
    "test_an_evaluation_whose_source_cache_stays_held_ends_as_a_timeout_not_a_hang",  # 14 s
    "tests/reliability/test_bad_input.py::test_recipe_overrides_with_wrong_types_or_keys[levels=[1-]",  # 13 s
    # at 2381531 make test took 14.0-14.4 min of pytest on a fresh clone here (942 passed; 10.5 min at dec8a75 on
    # an earlier host): these ~160 s more, each slow and with a twin, a sibling parameter or the same path left in
    # make test (the red team, the Postgres twins, the store's concurrent writers, the reference-variation tests stay)
    "tests/test_gpu_plan.py::test_fleet_workers_share_the_queue_and_a_killed_worker_s_job_is_taken_over",  # 13 s
    "tests/test_reports.py::test_cli_bench_stored_and_errors",  # 10 s
    "tests/test_devshare.py::test_a_batch_of_shipped_sets_stays_under_the_payload_limit",  # 10 s
    "tests/test_ipc_side.py::test_evaluation_with_outputs_through_the_side_file",  # 10 s
    "tests/test_training_units.py::test_speedup_reward_evaluates_and_records[sqlite]",  # 9 s
    "tests/test_worker.py::test_workers_up_forwards_sigterm_and_a_long_job_is_released",  # 7 s
    "tests/test_held_clock.py::test_cuda_graphs_is_on_by_default_and_a_cpu_evaluation_ignores_it",  # 10 s
    "tests/test_evaluator_start.py::test_a_fresh_candidate_worker_warms_up_while_the_reference_loads",  # 8 s
    "tests/test_eval_memory.py::test_calibration_holds_no_more_sets_than_a_timed_block",  # 7 s
    "tests/test_evaluator_seeds.py::test_faster_seed_passes_with_no_flag[03_LSTM-fused_lstm_op]",  # 6 s
    "tests/test_evaluator_seeds.py::test_faster_seed_passes_with_no_flag[03_LayerNorm-functional_layer_norm]",  # 7 s
    "tests/test_evaluator_seeds.py::"
    "test_faster_seed_passes_with_no_flag[04_TwoLinear_NoActivation-fused_weights]",  # 7 s
    "tests/test_devshare.py::test_outputs_that_cannot_be_exported_are_compared_through_the_host",  # 8 s
    "tests/test_runner.py::test_timeout_kills_the_step_and_is_retryable",  # 5 s
    "tests/reliability/test_bad_input.py::test_bad_recipe_files[list.yaml-needles1]",  # 3 s
    "tests/reliability/test_bad_input.py::test_bad_recipe_files[missing.yaml-needles3]",  # 3 s
    "tests/reliability/test_bad_input.py::test_bad_recipe_files[wrong_type.yaml-needles2]",  # 3 s
    "tests/reliability/test_bad_input.py::test_recipe_overrides_with_wrong_types_or_keys[=1-]",  # 2 s
    "tests/reliability/test_bad_input.py::"
    "test_recipe_overrides_with_wrong_types_or_keys[augment.max_retries=-1-]",  # 2 s
    "tests/reliability/test_bad_input.py::test_recipe_overrides_with_wrong_types_or_keys[eval.device=gpu-]",  # 2 s
    "tests/reliability/test_bad_input.py::"
    "test_recipe_overrides_with_wrong_types_or_keys[model.name_or_path.x=1-]",  # 2 s
    "tests/reliability/test_bad_input.py::test_recipe_overrides_with_wrong_types_or_keys[noequals-]",  # 2 s
    "tests/reliability/test_bad_input.py::test_recipe_overrides_with_wrong_types_or_keys[sft.epochs=-1-]",  # 3 s
    "tests/reliability/test_bad_input.py::test_recipe_overrides_with_wrong_types_or_keys[sft.nosuch=1-]",  # 3 s
    "tests/reliability/test_bad_input.py::test_malformed_task_file_in_cli_and_step[no_model.py]",  # 5 s
    "tests/reliability/test_bad_input.py::test_malformed_task_file_in_cli_and_step[syntax.py]",  # 5 s
    "tests/test_worker_service.py::test_a_task_whose_reference_cannot_load_fails_once_not_three_times[sqlite]",  # 2 s
    "tests/test_worker_service.py::test_lone_worker_reverifies_itself_after_the_window[sqlite]",  # 2 s
    "tests/test_worker_service.py::test_reverify_goes_to_the_other_worker_and_must_agree[sqlite]",  # 2 s
    # at ea0b071 make test took 16.5 min of pytest on a fresh clone here (issue 34 asks for 12). Each red-team
    # evaluation is ~5 s of worker start-up and ~9 s in all; these 19 go to test-slow, where the soak evaluates every
    # red-team candidate again through the service. make test keeps one of each kind of trick: honest work and the
    # network probe (isolation), the patched clock (bounded), caching by address and after the first calls,
    # precomputing while the harness stages inputs, a lazy output, stealing the reference's output, patching the
    # harness's inputs, a crash, a wrong shape, a syntax error (now free: compiled in the parent).
    *(f"tests/redteam/test_redteam_cpu.py::test_redteam_candidate[{name}]" for name in (
        "infinite_loop", "background_thread", "global_flags", "patch_worker_timer", "precompute_a_third",
        "leftover_children", "cache_by_values", "slow_the_reference", "defer_to_digest", "uninitialised_output",
        "exit_midway", "near_constant", "patch_library_ops", "patch_drawn_inputs", "host_oom", "forged_stdout",
        "shrunk_hyperparams", "missing_modelnew", "raises")),  # 147 s together
    "tests/reliability/test_store_faults.py::test_eight_concurrent_writers_postgres",  # 27 s
    "tests/test_evaluator.py::test_the_candidates_correctness_limit_covers_the_references_whole_request",  # 12 s
    "tests/test_evaluator.py::test_huge_outputs_get_fewer_correctness_sets_and_say_so",  # 10 s
    "tests/reliability/test_llm_faults.py::test_augment_step_with_an_endpoint_down_for_good[postgres]",  # 7 s
    "tests/reliability/test_llm_faults.py::test_a_dead_teacher_is_taken_as_down_after_its_failure_limit[postgres]",
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    has_cuda = _cuda_available()
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        if item.nodeid in SLOW_IN_MAKE_TEST:
            item.add_marker(pytest.mark.slow)


def _pg_admin_engine():
    from sqlalchemy import create_engine

    return create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The admin URL of the real Postgres; fails (not skips) when it is down: CI must start it."""
    from sqlalchemy import text

    eng = _pg_admin_engine()
    try:
        with eng.connect() as c:
            c.execute(text("select 1"))
    except Exception as e:  # pragma: no cover
        pytest.fail(f"Postgres at 127.0.0.1:5432 is not reachable ({e}); .ci/run starts it")
    finally:
        eng.dispose()
    return PG_ADMIN


def create_pg_database(prefix: str = "kernelrl_test") -> str:
    from sqlalchemy import text

    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    eng = _pg_admin_engine()
    with eng.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    eng.dispose()
    return PG_ADMIN.rsplit("/", 1)[0] + "/" + name


def drop_pg_database(url: str) -> None:
    from sqlalchemy import text

    name = url.rsplit("/", 1)[1]
    eng = _pg_admin_engine()
    with eng.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    eng.dispose()


@pytest.fixture
def pg_url(pg_server):
    """A fresh, empty Postgres database for one test."""
    url = create_pg_database()
    yield url
    drop_pg_database(url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request, tmp_path):
    """A migrated, empty store on SQLite and on the real Postgres."""
    from kernelrl.store import Store

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
        Store(url).upgrade()
        yield url
    else:
        request.getfixturevalue("pg_server")
        url = create_pg_database()
        store = Store(url)
        store.upgrade()
        store.engine.dispose()
        yield url
        drop_pg_database(url)


@pytest.fixture
def store(store_url):
    from kernelrl.store import Store

    s = Store(store_url)
    yield s
    s.engine.dispose()


@pytest.fixture
def isolated_home(tmp_path, monkeypatch):
    """KERNELRL_HOME in a temp dir, settings cache cleared: the embedded default, sandboxed per test."""
    from kernelrl.config.settings import get_settings

    monkeypatch.setenv("KERNELRL_HOME", str(tmp_path / "home"))
    for var in ("KERNELRL_STORE_URL", "KERNELRL_CHECKPOINT_URI"):
        monkeypatch.delenv(var, raising=False)
    get_settings.cache_clear()
    yield tmp_path / "home"
    get_settings.cache_clear()
