"""Foundation commands: ``tasks``, ``store``, ``checkpoints``, ``recipes``."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from kernelrl.cli.tables import table_console

console = Console()

tasks_app = typer.Typer(help="List and show tasks of a suite (builtin or a KernelBench checkout).",
                        no_args_is_help=True)
store_app = typer.Typer(help="The exemplar store: migrations and statistics.", no_args_is_help=True)
ckpt_app = typer.Typer(help="The checkpoint store (local directory or S3).", no_args_is_help=True)
recipes_app = typer.Typer(help="Named recipes and their knobs.", no_args_is_help=True)


def _levels(levels: str | None) -> list[int] | None:
    if not levels:
        return None
    try:
        return [int(x) for x in levels.split(",") if x.strip()]
    except ValueError:
        from kernelrl.errors import ConfigError

        raise ConfigError(f"--levels: expected comma-separated integers, got {levels!r}") from None


@tasks_app.command("list")
def tasks_list(
    suite: str = typer.Option("builtin", help="builtin, a KernelBench checkout directory, or a task .py file."),
    levels: str = typer.Option(None, help="Comma-separated levels, e.g. 1,2."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List a suite's tasks: key, level and the first line of each task's docstring."""
    from kernelrl.tasks import load_suite

    wanted = _levels(levels)
    tasks = load_suite(suite, wanted)
    if not tasks and wanted:  # a filter that selects nothing is a mistake worth saying (exit 2), not an empty table
        from kernelrl.errors import ConfigError

        have = sorted({t.level for t in load_suite(suite)})
        raise ConfigError(f"suite {suite}: no task at levels {','.join(map(str, wanted))} "
                          f"(it has levels {','.join(map(str, have)) or 'none'})")
    if as_json:
        typer.echo(json.dumps([{"key": t.key, "name": t.name, "level": t.level} for t in tasks], indent=1))
        return
    table = Table(title=f"{len(tasks)} tasks in {suite}")
    table.add_column("key", no_wrap=True)
    table.add_column("level", justify="right")
    table.add_column("description")
    for t in tasks:
        doc = _first_doc_line(t.source)
        table.add_row(t.key, str(t.level), doc)
    table_console(60 + max(len(t.key) for t in tasks)).print(table)


def _first_doc_line(source: str) -> str:
    """The first line of the module's docstring, or else of ``class Model``'s (KernelBench's problems document the
    model, not the module)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    models = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"]
    for node in (tree, *models):
        doc = (ast.get_docstring(node) or "").strip()
        if doc:
            return doc.splitlines()[0]
    return ""


@tasks_app.command("show")
def tasks_show(
    task: str = typer.Argument(..., help="Task key, name or file path."),
    suite: str = typer.Option("builtin", help="Suite to look the name up in."),
) -> None:
    """Print a task's reference source (the PyTorch Model a candidate ModelNew must match)."""
    from kernelrl.tasks import get_task

    t = get_task(task, suite=suite)
    console.rule(f"{t.key} (level {t.level})")
    typer.echo(t.source)


@store_app.command("upgrade")
def store_upgrade(url: str = typer.Option(None, "--store-url", help="Store URL (default: KERNELRL_STORE_URL or the "
                                          "SQLite file)."),
                  ) -> None:
    """Apply the store's migrations (SQLite or Postgres); safe to run again."""
    from kernelrl.config.settings import redact_url
    from kernelrl.store import Store

    store = Store(url)
    store.upgrade()
    typer.echo(f"store {redact_url(store.url)} at revision {store.current_revision()}")


@store_app.command("stats")
def store_stats(
    url: str = typer.Option(None, "--store-url", help="Store URL (default: KERNELRL_STORE_URL or the SQLite file)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Count what the store holds: tasks, candidates, evaluations, attempts, jobs."""
    from kernelrl.store import Store

    store = Store(url)
    store.upgrade()
    stats = store.stats()
    if as_json:
        typer.echo(json.dumps(stats, indent=1))
        return
    table = Table(title="exemplar store")
    table.add_column("what")
    table.add_column("count", justify="right")
    for k, v in stats.items():
        table.add_row(k, str(v))
    console.print(table)


@ckpt_app.command("ls")
def checkpoints_ls(
    prefix: str = typer.Argument("", help="Only checkpoints whose name starts with this."),
    uri: str = typer.Option(None, help="Checkpoint store URI (default: KERNELRL_CHECKPOINT_URI)."),
) -> None:
    """List the complete checkpoints (those whose manifest exists) with their size and date."""
    from kernelrl.checkpoints import open_checkpoint_store

    store = open_checkpoint_store(uri)
    items = store.ls(prefix)
    table = Table(title=f"{len(items)} complete checkpoints")
    for col in ("name", "files", "bytes", "created"):
        table.add_column(col)
    for it in items:
        table.add_row(it.name, str(it.files), str(it.bytes), str(it.created_at))
    console.print(table)


@recipes_app.command("list")
def recipes_list() -> None:
    """The named recipes (recipes/*.yaml) with their descriptions."""
    from kernelrl.config.recipes import list_recipes, load_recipe

    for name in list_recipes():
        typer.echo(f"{name:12s} {load_recipe(name).description}")


@recipes_app.command("show")
def recipes_show(name: str = typer.Argument(..., help="Recipe name or YAML path.")) -> None:
    """Print a recipe with every default filled in (what a step would run with)."""
    import yaml

    from kernelrl.config.recipes import load_recipe

    typer.echo(yaml.safe_dump(load_recipe(name).to_dict(), sort_keys=False))


@recipes_app.command("fields")
def recipes_fields() -> None:
    """Every recipe knob with its default and why it is there."""
    from kernelrl.config.recipes import field_help

    table = Table(title="recipe fields")
    for col in ("field", "default", "help"):
        table.add_column(col)
    for row in field_help():
        table.add_row(*row)
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(tasks_app, name="tasks")
    app.add_typer(store_app, name="store")
    app.add_typer(ckpt_app, name="checkpoints")
    app.add_typer(recipes_app, name="recipes")
