"""The step contract that steps/, flows/ and the CLI share: the stage registry, a step's command line and
context, the one ``--set`` parser, and the JSON manifest a step ends with.

Every step runs alone, in a container or as a local process:

    python -m steps.<stage> --recipe smoke --run NAME [--manifest-out PATH] [--set sft.epochs=1 ...] [--dry-run]

It reads the store URL and checkpoint URI from the environment (KERNELRL_*), finds its upstream stages'
outputs through the store's stage records, writes its outputs to the store and the checkpoint store, and
ends by writing a small manifest (URIs and metrics, never models) to --manifest-out and as the last line of
stdout. Exit status 0 means the manifest is complete; anything else is a failure the flow may retry.

The library owns this contract so that it never imports the orchestration around it: ``steps/<stage>.py`` are
thin entrypoints over it, ``flows/`` run those entrypoints, and ``kernelrl train`` calls the same bodies
(``STAGE_BODIES``) in-process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kernelrl.config.recipes import Recipe, load_recipe
from kernelrl.config.settings import Settings, load_settings
from kernelrl.errors import ConfigError, KernelRLError
from kernelrl.logs import configure_logging

STAGES = ("augment", "sft", "selfsup", "crl", "bench")
DEFAULT_RECIPE = "smoke"  # the embedded default (make pipeline): every entrypoint's --recipe default
# Bump a stage's version when its code changes what it produces: part of the flow's cache key.
STAGE_VERSIONS = {"augment": "1", "sft": "1", "selfsup": "1", "crl": "1", "bench": "1"}
MANIFEST_MARKER = "KERNELRL_MANIFEST "
PROGRESS_MARKER = "KERNELRL_PROGRESS "
# Each stage's body (``body(ctx) -> {"outputs", "metrics"}``), named rather than imported so that reading the
# registry costs no torch import. steps/<stage>.py and ``kernelrl train`` run the same function.
STAGE_BODIES = {
    "augment": "kernelrl.training.stages:run_augment_stage",
    "sft": "kernelrl.training.stages:run_sft",
    "selfsup": "kernelrl.training.stages:run_selfsup",
    "crl": "kernelrl.training.stages:run_crl",
    "bench": "kernelrl.reports.stage:run_bench_stage",
}
TRAIN_STAGES = ("augment", "sft", "selfsup", "crl")
# The upstream stage each training body reads first (StepContext.upstream): checked before the body's module is
# imported, so a stage run out of order says so at once instead of after torch and trl load (crl: 5.3 s, 2026-11-29).
STAGE_NEEDS = {"sft": "augment", "selfsup": "sft", "crl": "selfsup"}


def stage_body(stage: str) -> Callable[["StepContext"], dict[str, Any]]:
    """The body of ``stage`` (STAGE_BODIES), imported when it is called: a bad recipe or ``--set``, or an upstream
    stage that has not finished (STAGE_NEEDS), is rejected before torch and the training libraries load (crl's step
    took 5.3 s to reject ``levels=[9]``, 2026-11-29)."""
    import importlib

    if stage not in STAGE_BODIES:
        raise ConfigError(f"stage {stage!r}: expected one of {', '.join(STAGES)}")
    module, _, name = STAGE_BODIES[stage].partition(":")

    def body(ctx: "StepContext") -> dict[str, Any]:
        if stage in STAGE_NEEDS:
            ctx.upstream(STAGE_NEEDS[stage])
        return getattr(importlib.import_module(module), name)(ctx)

    body.__name__ = body.__qualname__ = name
    return body


@dataclass
class StepContext:
    stage: str
    run: str
    recipe: Recipe
    settings: Settings
    manifest_out: Path
    dry_run: bool = False
    started: float = field(default_factory=time.time)
    _store: Any = None

    @property
    def store(self):
        """The exemplar store, migrated on first use."""
        if self._store is None:
            from kernelrl.store import Store

            self._store = Store(self.settings.resolved_store_url)
            self._store.upgrade()
        return self._store

    @property
    def work_dir(self) -> Path:
        """Local scratch for this run and stage (trainer output dirs, resumable state)."""
        d = self.settings.home / "runs" / self.run / self.stage
        d.mkdir(parents=True, exist_ok=True)
        return d

    def upstream(self, stage: str) -> dict[str, Any]:
        """The manifest of an upstream stage of the same run; a clear error if it has not finished."""
        rec = self.store.stage_record(self.run, stage)
        if rec is None or rec["status"] != "done":
            raise KernelRLError(f"run {self.run!r}: stage {stage!r} has not finished; run it first")
        return rec["manifest"]


def split_sets(items: list[str]) -> dict[str, str]:
    """``["sft.epochs=1", ...]`` -> ``{"sft.epochs": "1"}``: the values as typed (they are handed on to steps
    as text), each checked to be valid YAML so that bad input fails here, in one line."""
    out: dict[str, str] = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise ConfigError(f"--set {item!r}: expected key=value")
        try:
            yaml.safe_load(v)
        except yaml.YAMLError as e:  # e.g. --set 'levels=[1': one line, not yaml's multi-line trace
            raise ConfigError(f"--set {item!r}: value is not valid YAML ({str(e).splitlines()[0]})") from None
        out[k.strip()] = v
    return out


def load_overrides(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """Override values as a recipe reads them: text is YAML (``1`` -> int, ``[1,2]`` -> list), others as given."""
    return {k: yaml.safe_load(v) if isinstance(v, str) else v for k, v in (overrides or {}).items()}


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` arguments as recipe overrides (``split_sets`` then ``load_overrides``)."""
    return load_overrides(split_sets(items))


def step_parser(stage: str, description: str = "") -> argparse.ArgumentParser:
    """The command line every step takes (``python -m steps.<stage> --help``)."""
    parser = argparse.ArgumentParser(prog=f"python -m steps.{stage}", description=description)
    parser.add_argument("--recipe", default=DEFAULT_RECIPE, help="Recipe name (recipes/*.yaml) or YAML path.")
    parser.add_argument("--run", required=True, help="Run name: groups the stages of one pipeline run.")
    parser.add_argument("--manifest-out", default=None, help="Where to write the JSON manifest.")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="Override a recipe value, e.g. --set sft.epochs=1 (repeatable).")
    parser.add_argument("--dry-run", action="store_true", help="Build everything, do no work, write a manifest.")
    return parser


def inputs_digest(recipe: Recipe, stage: str, upstream: dict[str, Any] | None = None) -> str:
    """Digest of what determines a stage's output: recipe values, stage version, upstream manifests."""
    blob = json.dumps({"recipe": recipe.to_dict(), "stage": stage, "version": STAGE_VERSIONS.get(stage),
                       "upstream": upstream or {}}, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def write_manifest(ctx: StepContext, *, status: str = "done", outputs: dict[str, Any] | None = None,
                   metrics: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    manifest = {
        "stage": ctx.stage,
        "run": ctx.run,
        "recipe": ctx.recipe.name,
        "recipe_digest": ctx.recipe.digest(),
        "status": status,
        "dry_run": ctx.dry_run,
        "outputs": outputs or {},
        "metrics": metrics or {},
        "wall_s": round(time.time() - ctx.started, 2),
        **(extra or {}),
    }
    ctx.manifest_out.parent.mkdir(parents=True, exist_ok=True)
    tmp = ctx.manifest_out.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, default=str))
    os.replace(tmp, ctx.manifest_out)  # never a half-written manifest
    print(MANIFEST_MARKER + json.dumps(manifest, default=str), flush=True)
    return manifest


def run_step(stage: str, body: Callable[[StepContext], dict[str, Any]], argv: list[str] | None = None,
             description: str = "") -> int:
    """Parse the common arguments, build the context, run ``body`` and write its manifest.

    ``body`` returns ``{"outputs": ..., "metrics": ...}``. The stage record in the store goes running ->
    done/failed around it, so flows and ``kernelrl pipeline`` see what happened.
    """
    args = step_parser(stage, description).parse_args(argv)
    try:
        settings = load_settings()
        configure_logging(settings.log_level, f"%(asctime)s {stage} %(levelname)s %(message)s", settings)
        recipe = load_recipe(args.recipe, parse_sets(args.set))
        out = (Path(args.manifest_out) if args.manifest_out
               else settings.home / "runs" / args.run / f"{stage}.manifest.json")
        ctx = StepContext(stage=stage, run=args.run, recipe=recipe, settings=settings, manifest_out=out,
                          dry_run=args.dry_run)
        ctx.store.set_stage(args.run, stage, status="running", recipe=recipe.name)
        try:
            result = body(ctx) or {}
        except BaseException as e:
            ctx.store.set_stage(args.run, stage, status="failed", error=f"{type(e).__name__}: {e}"[:2000])
            raise
        manifest = write_manifest(ctx, outputs=result.get("outputs"), metrics=result.get("metrics"),
                                  extra={k: v for k, v in result.items() if k not in ("outputs", "metrics")})
        # inputs={}: what an unfinished attempt kept for its re-run (the bench's pool pin) ends with the stage, in
        # the same write that marks it done (a kill between two writes would leave a finished stage's pin behind)
        ctx.store.set_stage(args.run, stage, status="done", manifest=manifest, inputs={},
                            checkpoint_uri=(result.get("outputs") or {}).get("checkpoint"))
        return 0
    except KernelRLError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
