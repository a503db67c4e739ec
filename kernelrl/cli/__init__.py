"""The ``kernelrl`` command line (typer + rich).

    kernelrl tasks list --suite builtin          kernelrl tasks show 02_Softmax
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
    context_settings={"help_option_names": ["-h", "--help"]},  # every subcommand inherits -h
)

# The library's own command groups (module under kernelrl.cli, the commands it provides). Each module exposes
# ``register(app)``.
COMMAND_MODULES: list[tuple[str, tuple[str, ...]]] = [
    ("basic", ("tasks", "store", "checkpoints", "recipes")),
    ("evaluate", ("eval",)),
    ("worker", ("worker", "workers")),
    ("optimize", ("optimize",)),
    ("train", ("train",)),
    ("bench", ("bench", "ablate")),
]
# Commands of the layers above the library (``kernelrl pipeline`` lives in flows/cli.py): found through the
# ``kernelrl.cli`` entry-point group (pyproject.toml), so the library never imports them. Images that put the
# source on sys.path without installing it have no entry points: these names are tried then.
PLUGIN_GROUP = "kernelrl.cli"
PLUGINS_WITHOUT_METADATA = {"pipeline": "flows.cli:register"}


def _plugins() -> dict[str, str]:
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group=PLUGIN_GROUP)}
    return found or dict(PLUGINS_WITHOUT_METADATA)


def _missing_layer(name: str, target: str, error: Exception):
    def cmd(ctx: typer.Context) -> None:
        typer.secho(f"error: kernelrl {name} needs {target.split(':')[0]} ({error}); install the project from its "
                    "repository (pip install -e .) to get the orchestration layer", err=True, fg=typer.colors.RED)
        raise typer.Exit(2)

    cmd.__doc__ = f"(unavailable here: {target.split(':')[0]} cannot be imported)"
    return cmd


def _register_all() -> None:
    for module, _ in COMMAND_MODULES:
        importlib.import_module(f"kernelrl.cli.{module}").register(app)
    for name, target in sorted(_plugins().items()):
        module, _, attr = target.partition(":")
        try:
            register = getattr(importlib.import_module(module), attr or "register")
        except ImportError as e:  # the library installed without its orchestration layer
            app.command(name, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
                _missing_layer(name, target, e))
            continue
        register(app)


def _version(value: bool) -> None:
    if value:
        from kernelrl import EVALUATOR_VERSION, __version__

        typer.echo(f"kernelrl {__version__} (evaluator {EVALUATOR_VERSION})")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print the package and evaluator versions and exit.")) -> None:
    """Contrastive RL that teaches an LLM to write faster GPU kernels (CUDA-L1, reimplemented)."""


_register_all()


_BOOL_WORDS = {"true": True, "false": False}


def _bool_flags(cmd) -> tuple[dict[str, tuple[str, str | None]], set[str]]:
    """``{option: (its spelling for true, for false or None)}`` for the boolean flags of a click command, and
    the options that take a value (their value is skipped while looking for subcommand names)."""
    flags: dict[str, tuple[str, str | None]] = {}
    valued: set[str] = set()
    for p in getattr(cmd, "params", []):
        opts, neg = list(getattr(p, "opts", [])), list(getattr(p, "secondary_opts", []))
        if getattr(p, "is_bool_flag", False):
            on, off = opts[0], (neg[0] if neg else None)
            flags.update({o: (on, off) for o in opts})
            flags.update({o: (off, on) for o in neg})
            if off is None and p.default:  # --x false would need a --no-x this flag does not have
                for o in opts:
                    flags.pop(o, None)
        elif getattr(p, "param_type_name", "") == "option" and not getattr(p, "is_flag", False):
            valued.update(opts)
    return flags, valued


def bool_values(command, argv: list[str]) -> list[str]:
    """``--json true``, ``--plots false``, ``--stored=true``: the help shows boolean flags as ``<bool>``, so
    they take an explicit true/false too (rewritten to ``--x`` / ``--no-x``; a false for a flag without a
    ``--no-`` form is dropped, its default being false). Everything else passes through unchanged."""
    cmd, out, i = command, [], 0
    flags, valued = _bool_flags(cmd)
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out += argv[i:]
            break
        subs = getattr(cmd, "commands", None)
        if subs and a in subs:
            cmd = subs[a]
            flags, valued = _bool_flags(cmd)
            out.append(a)
            i += 1
            continue
        name, eq, val = a.partition("=")
        nxt = argv[i + 1].lower() if i + 1 < len(argv) else ""
        if name in flags and ((eq and val.lower() in _BOOL_WORDS) or (not eq and nxt in _BOOL_WORDS)):
            on, off = flags[name]
            value = _BOOL_WORDS[val.lower() if eq else nxt]
            if (on if value else off) is not None:
                out.append(on if value else off)
            i += 1 if eq else 2
            continue
        takes_value = a in valued and i + 1 < len(argv)  # its value is not a subcommand name
        out += argv[i:i + 2] if takes_value else [a]
        i += 2 if takes_value else 1
    return out


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point. Usage errors (unknown option, missing argument) and user errors
    (``KernelRLError``) print one plain line on stderr and exit 2; a command's own exit status passes through."""
    from typer import exceptions as tex

    try:  # typer vendors click (typer._click); older typer releases use click itself
        from typer._click import exceptions as cex
    except ImportError:  # pragma: no cover
        from click import exceptions as cex
    exit_types = tuple({tex.Exit, getattr(cex, "Exit", tex.Exit)})
    abort_types = tuple({tex.Abort, getattr(cex, "Abort", tex.Abort)})

    command = typer.main.get_command(app)
    argv = bool_values(command, list(sys.argv[1:] if argv is None else argv))
    try:
        # Not standalone: click hands back usage errors (printed below as one line) instead of a Rich panel, and
        # returns a command's ``typer.Exit(code)`` as its value.
        rv = command.main(args=argv, prog_name="kernelrl", standalone_mode=False)
    except exit_types as e:
        return e.exit_code
    except abort_types:
        typer.echo("aborted", err=True)
        return 1
    except cex.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # a bare group: its help, as click prints it
            typer.echo(e.format_message(), err=True)
            return 2
        where = " ".join(["kernelrl", *e.ctx.command_path.split()[1:]]) if e.ctx else "kernelrl"
        typer.secho(f"error: {e.format_message()} (see '{where} --help')", err=True, fg=typer.colors.RED)
        return 2
    except cex.ClickException as e:
        typer.secho(f"error: {e.format_message()}", err=True, fg=typer.colors.RED)
        return e.exit_code
    except KernelRLError as e:
        typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
        return 2
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


if __name__ == "__main__":
    sys.exit(main())
