"""``kernelrl worker`` (one evaluation worker on one device) and ``kernelrl workers up`` (one per GPU).

    kernelrl worker --device cuda:0 [--store URL] [--lease-s 30] [--max-jobs N] [--idle-exit-s S]
    kernelrl worker --device cuda:1 --sandbox docker --image kernelrl/evaluator:dev
    kernelrl workers up --gpus all            # one worker process per visible GPU; SIGTERM stops them all
    kernelrl workers up --gpus 0,1 --cpu 2    # GPUs 0 and 1, plus two CPU workers

A worker claims jobs from the store's queue (``kernelrl.store.queue``), evaluates them one at a time and
writes each result once. SIGTERM/SIGINT: it finishes the current job if that ends within --grace-s, else
gives it back to the queue, and exits 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import typer

workers_app = typer.Typer(help="Start evaluation workers: one per visible GPU, or N on the CPU.", no_args_is_help=True)


def _check_device(device: str) -> str:
    from kernelrl.config.devices import resolve_device

    return resolve_device(device)


def worker(
    device: str = typer.Option("cpu", help="cpu or cuda:N: the one device this worker times on (dedicated)."),
    store: str = typer.Option(None, help="Store URL (default: KERNELRL_STORE_URL or the SQLite file in the home)."),
    lease_s: float = typer.Option(30.0, help="Lease length; a heartbeat every lease/3 extends it. A dead worker's "
                                  "job is claimed again this long after its last heartbeat."),
    max_jobs: int = typer.Option(None, help="Exit after this many jobs (default: run until stopped)."),
    idle_exit_s: float = typer.Option(None, help="Exit after this many seconds without work (default: never)."),
    idle_sleep_s: float = typer.Option(0.5, help="Poll interval while the queue is empty."),
    grace_s: float = typer.Option(60.0, help="On SIGTERM, wait this long for the current job, then release it."),
    reverify_wait_s: float = typer.Option(
        30.0, help="A suspicious speedup is re-measured by another worker of the same GPU type if one takes it "
        "within this many seconds; after that by this worker in fresh processes. 0: always here, at once."),
    precompile: bool = typer.Option(True, help="Pre-build the next queued candidates' extensions while timing "
                                    "(CUDA workers only: on CPU a compiler would perturb the timing)."),
    sandbox: str = typer.Option("process", help="process (sandboxed subprocesses) or docker (a throw-away "
                                "container per candidate, no network, read-only root, one GPU by UUID)."),
    image: str = typer.Option(None, help="Evaluator image for --sandbox docker (containers/evaluator.Dockerfile)."),
    worker_id: str = typer.Option(None, help="Identity in the queue (default host:pid:device)."),
    evaluate_fn: str = typer.Option(None, hidden=True, help="TESTS ONLY: module:attr of a fake evaluate function."),
) -> None:
    """Claim evaluation jobs from the store and run them one at a time on DEVICE (SIGTERM stops gracefully)."""
    import logging

    from kernelrl.errors import ConfigError

    if sandbox not in ("process", "docker"):
        raise ConfigError(f"--sandbox must be process or docker, got {sandbox!r}")
    device = _check_device(device)  # before the heavy imports: a typo fails at once

    from kernelrl.evaluation.jobworker import Worker, load_evaluate_fn
    from kernelrl.store import Store

    from kernelrl.config.settings import load_settings
    from kernelrl.logs import configure_logging

    configure_logging(logging.INFO, "%(asctime)s %(name)s %(message)s", load_settings())
    st = Store(store)
    st.upgrade()
    w = Worker(st, device=device, worker_id=worker_id, lease_s=lease_s, max_jobs=max_jobs, idle_exit_s=idle_exit_s,
               idle_sleep_s=idle_sleep_s, grace_s=grace_s, reverify_wait_s=reverify_wait_s, precompile=precompile,
               evaluate_fn=load_evaluate_fn(evaluate_fn) if sandbox == "process" else (lambda *a: None),
               sandbox=sandbox, image=image, owns_process=True)
    w.install_signal_handlers()
    typer.echo(f"worker {w.worker_id} on {device} ({w.device_type}{', ' + w.gpu_uuid if w.gpu_uuid else ''}) "
               f"serving {st!r}", err=True)
    n = w.run()
    typer.echo(f"worker {w.worker_id}: {n} jobs done, {w.released} released")


def _gpu_devices(gpus: str) -> list[str]:
    from kernelrl.errors import ConfigError

    if gpus in ("none", ""):
        return []
    import torch

    n = torch.cuda.device_count()
    if gpus == "all":
        return [f"cuda:{i}" for i in range(n)]
    try:
        idx = [int(g) for g in gpus.split(",")]
    except ValueError:
        raise ConfigError(f"--gpus must be 'all', 'none' or a comma list of indices, got {gpus!r}") from None
    bad = [i for i in idx if not 0 <= i < n]
    if bad:
        raise ConfigError(f"--gpus {gpus}: no GPU {bad[0]} (this machine has {n} visible)")
    return [f"cuda:{i}" for i in idx]


@workers_app.command("up")
def workers_up(
    gpus: str = typer.Option("all", help="'all' visible GPUs, a comma list of indices (0,1), or 'none'."),
    cpu: int = typer.Option(0, help="Also start this many CPU workers."),
    store: str = typer.Option(None, help="Store URL (passed to every worker)."),
    lease_s: float = typer.Option(30.0, help="Lease length of every worker."),
    idle_exit_s: float = typer.Option(None, help="Workers exit after this many idle seconds (default: never)."),
    reverify_wait_s: float = typer.Option(30.0, help="See `kernelrl worker --help`."),
    grace_s: float = typer.Option(60.0, help="On SIGTERM each worker waits this long for its job, then releases it."),
    sandbox: str = typer.Option("process", help="process or docker (see `kernelrl worker --help`)."),
    image: str = typer.Option(None, help="Evaluator image for --sandbox docker."),
    evaluate_fn: str = typer.Option(None, hidden=True, help="TESTS ONLY: forwarded to every worker."),
) -> None:
    """Start one worker process per GPU (and N CPU workers) in the foreground; SIGTERM/SIGINT is forwarded to
    them (each finishes or releases its job); exits when all have exited, non-zero if any failed."""
    from kernelrl.errors import ConfigError

    devices = _gpu_devices(gpus) + ["cpu"] * cpu
    if not devices:
        raise ConfigError("no devices: no visible GPUs selected and --cpu 0")
    from kernelrl.store import Store

    st = Store(store)
    st.upgrade()  # once, here: N workers migrating a fresh store at the same moment would race
    st.engine.dispose()
    procs: list[tuple[str, subprocess.Popen]] = []
    # The store URL (it may hold a password) goes through the environment, never argv: any user on the host,
    # a candidate kernel included, can read /proc/<pid>/cmdline.
    env = dict(os.environ, KERNELRL_STORE_URL=store) if store else None
    for d in devices:
        cmd = [sys.executable, "-m", "kernelrl.cli", "worker", "--device", d, "--lease-s", str(lease_s),
               "--reverify-wait-s", str(reverify_wait_s), "--grace-s", str(grace_s), "--sandbox", sandbox]
        cmd += ["--image", image] if image else []
        cmd += ["--idle-exit-s", str(idle_exit_s)] if idle_exit_s is not None else []
        cmd += ["--evaluate-fn", evaluate_fn] if evaluate_fn else []
        procs.append((d, subprocess.Popen(cmd, env=env)))
        typer.echo(f"started worker pid {procs[-1][1].pid} on {d}", err=True)

    def forward(signum, frame):
        for _, p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while any(p.poll() is None for _, p in procs):
        time.sleep(0.5)
    failed = [(d, p.returncode) for d, p in procs if p.returncode != 0]
    for d, rc in failed:
        typer.echo(f"worker on {d} exited with status {rc}", err=True)
    raise typer.Exit(1 if failed else 0)


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)
    app.add_typer(workers_app, name="workers")
