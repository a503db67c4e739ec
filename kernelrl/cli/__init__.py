"""The ``kernelrl`` command line (typer + rich).

    kernelrl tasks list --suite builtin          kernelrl tasks show 03_Softmax
    kernelrl store upgrade | stats               kernelrl checkpoints ls
    kernelrl recipes list | show smoke | fields
    kernelrl eval TASK.py CANDIDATE.py --json    kernelrl optimize TASK.py --llm URL_OR_MODEL
    kernelrl worker --device cpu                 kernelrl workers up --gpus all
    kernelrl train STAGE --recipe smoke          kernelrl pipeline run --recipe smoke
    kernelrl bench --suite builtin               kernelrl ablate KERNEL.py

Each command group lives in its own module (``kernelrl/cli/<group>.py``) exposing ``register(app)``; the list
below is the registry. User errors (``KernelRLError``) print as one line and exit with status 2.
"""

from __future__ import annotations

import importlib
import sys

import typer

from kernelrl.errors import KernelRLError

app = typer.Typer(
    name="kernelrl",
    help="Contrastive RL that teaches an LLM to write faster GPU kernels (CUDA-L1, reimplemented).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# (module under kernelrl.cli, the command names it provides, the issue that delivers it)
COMMAND_MODULES: list[tuple[str, tuple[str, ...], str]] = [
    ("basic", ("tasks", "store", "checkpoints", "recipes"), "foundation"),
    ("evaluate", ("eval",), "evaluator"),
    ("worker", ("worker", "workers"), "evaluation service"),
    ("optimize", ("optimize",), "LLM layer"),
    ("train", ("train",), "training stages"),
    ("pipeline", ("pipeline",), "orchestration"),
    ("bench", ("bench", "ablate"), "benchmarks"),
]


def _not_yet(name: str, issue: str):
    def cmd(ctx: typer.Context) -> None:
        typer.echo(f"kernelrl {name}: not yet (delivered by the {issue} work)")
        raise typer.Exit(1)

    cmd.__doc__ = f"(not yet: delivered by the {issue} work)"
    return cmd


def _register_all() -> None:
    for module, names, issue in COMMAND_MODULES:
        qualified = f"kernelrl.cli.{module}"
        try:
            mod = importlib.import_module(qualified)
        except ModuleNotFoundError as e:
            if e.name != qualified:
                raise
            for name in names:
                app.command(name, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
                    _not_yet(name, issue))
            continue
        mod.register(app)


_register_all()


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point. Usage errors exit 2 (click); user errors print one line and exit 2."""
    try:
        app(args=argv)  # standalone mode: always ends in SystemExit with the command's status
    except KernelRLError as e:
        typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
