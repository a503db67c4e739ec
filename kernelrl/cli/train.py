"""``kernelrl train``: run one training stage in this process (the same body as ``python -m steps.<stage>``).

    kernelrl train augment --recipe smoke --run r1
    kernelrl train sft --recipe smoke --run r1 --set sft.epochs=1
    kernelrl train selfsup --recipe smoke --run r1
    kernelrl train crl --recipe smoke --run r1 --set crl.steps=4 --manifest-out crl.json
    kernelrl train crl --recipe smoke --run r1 --dry-run

Stages need their upstream stage of the same run to be done (augment -> sft -> selfsup -> crl). A stage that
was killed resumes from its checkpoints when run again with the same run name. Multi-GPU:
``accelerate launch --num_processes N -m steps.<stage> ...`` (see bench/multi_gpu_train.sh).
"""

from __future__ import annotations

import typer

from kernelrl.step import DEFAULT_RECIPE, TRAIN_STAGES


def train(
    stage: str = typer.Argument(..., help="augment, sft, selfsup or crl."),
    recipe: str = typer.Option(DEFAULT_RECIPE, "--recipe", help="Recipe name (recipes/*.yaml) or a YAML path."),
    run: str = typer.Option(..., "--run", help="Run name: groups the stages of one pipeline run."),
    set_: list[str] = typer.Option([], "--set", help="Override a recipe value, e.g. --set sft.epochs=1 (repeatable)."),
    manifest_out: str = typer.Option(None, "--manifest-out", help="Where to write the JSON manifest."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Build everything, do no work, write a manifest."),
) -> None:
    """Run a training stage in-process (augment, sft, selfsup, crl)."""
    if stage not in TRAIN_STAGES:
        typer.secho(f"error: unknown stage {stage!r}; expected one of {', '.join(TRAIN_STAGES)}", err=True,
                    fg=typer.colors.RED)
        raise typer.Exit(2)
    from kernelrl.step import stage_body
    from kernelrl.training.dist import run_stage

    argv = ["--recipe", recipe, "--run", run]
    for s in set_:
        argv += ["--set", s]
    if manifest_out:
        argv += ["--manifest-out", manifest_out]
    if dry_run:
        argv.append("--dry-run")
    raise typer.Exit(run_stage(stage, stage_body(stage), argv, description=f"kernelrl train {stage}"))


def register(app: typer.Typer) -> None:
    app.command("train")(train)
