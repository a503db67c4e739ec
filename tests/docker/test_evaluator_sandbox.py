"""The evaluator's container sandbox (kernelrl/evaluation/docker_sandbox.py) on a real engine, CPU only.

The launch spec is the evaluator's own (``container_spec``: network none, read-only root, tmpfs /tmp, every
capability dropped, no-new-privileges, pids/memory limits, non-root user, allow-listed env) minus the GPU
request, which a CPU machine cannot satisfy (``DeviceRequest`` needs the NVIDIA runtime; GPU pinning by UUID is
checked without an engine in tests/test_docker_spec.py and on GPU machines, see infra/ENGINES.md).

- a probe run as the container's main process reports what it can see and do, and the test asserts on it;
- a hostile candidate evaluated through ``run_in_container`` probes the same things from inside the candidate
  (it answers wrongly if anything leaks, so ``correct`` proves nothing did), and its result comes back;
- a fork-bombing candidate (held by the pids limit) still gets a result back, flagged, and leaves no
  container behind.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

MEM = "2g"
PIDS = 256
PLANTED = {"KERNELRL_STORE_URL": "postgresql+psycopg2://kr:planted-secret-1@127.0.0.1:5432/x",
           "AWS_SECRET_ACCESS_KEY": "planted-secret-2", "KERNELRL_S3_SECRET_ACCESS_KEY": "planted-secret-3",
           "KERNELRL_LLM_API_KEY": "planted-secret-4", "AWS_ACCESS_KEY_ID": "planted-secret-5"}

# What the code in the container checks; shared by the probe and the hostile candidate.
PROBES = textwrap.dedent('''
    import errno, json, os, socket, subprocess, sys, threading

    def _try(fn):
        try:
            return ("ok", fn())
        except BaseException as e:  # noqa
            return ("denied", f"{type(e).__name__}: {e}"[:200])

    def _connect(host, port):
        s = socket.create_connection((host, port), timeout=2)
        s.close()
        return "connected"

    def _udp(host, port):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        s.sendto(b"x", (host, port))
        s.close()
        return "sent"

    def _write(path):
        p = os.path.join(path, ".kernelrl-probe")
        with open(p, "w") as f:
            f.write("x")
        os.unlink(p)
        return "written"

    def _status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return line.split(":", 1)[1].strip()

    def _read(*paths):
        for p in paths:
            try:
                return open(p).read().strip()
            except OSError:
                pass

    def observe(host_ip):
        env = dict(os.environ)
        net = {
            "postgres_loopback": _try(lambda: _connect("127.0.0.1", 5432)),
            "postgres_host_ip": _try(lambda: _connect(host_ip, 5432)),
            "public_https": _try(lambda: _connect("1.1.1.1", 443)),
            "public_udp_dns": _try(lambda: _udp("8.8.8.8", 53)),
            "dns_lookup": _try(lambda: socket.getaddrinfo("pypi.org", 443)),
        }
        writes = {p: _try(lambda p=p: _write(p)) for p in
                  ("/", "/etc", "/opt/kernelrl", "/opt/venv", "/usr/local", "/job", "/var/tmp", "/root", "/tmp")}
        return {
            "uid": os.getuid(), "gid": os.getgid(), "cap_eff": _status("CapEff"), "no_new_privs": _status("NoNewPrivs"),
            "env_names": sorted(env),
            "secret_names": sorted(k for k in env if k.startswith("AWS_") or (k.startswith("KERNELRL_") and
                                   k != "KERNELRL_HOME")
                                   or any(w in k for w in ("TOKEN", "SECRET", "PASSWORD", "KEY"))),
            "planted_values_seen": sorted(k for k, v in env.items() if "planted" in v),
            "interfaces": sorted(os.listdir("/sys/class/net")),
            "net": net, "writes": writes,
            "docker_socket": os.path.exists("/var/run/docker.sock"),
            "pg_unix_socket": os.path.exists("/var/run/postgresql"),
            "memory_limit": _read("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"),
            "pids_limit": _read("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"),
        }

    def leaks(obs):
        bad = []
        bad += [f"net:{k}" for k, (r, _) in obs["net"].items() if r == "ok"]
        bad += [f"write:{k}" for k, (r, _) in obs["writes"].items() if r == "ok" and k != "/tmp"]
        bad += [f"secret:{k}" for k in obs["secret_names"] + obs["planted_values_seen"]]
        if obs["interfaces"] != ["lo"]:
            bad.append("interfaces")
        if obs["uid"] == 0 or int(obs["cap_eff"] or "0", 16) != 0:
            bad.append("privileges")
        if obs["docker_socket"] or obs["pg_unix_socket"]:
            bad.append("sockets")
        return bad
''')

PROBE_MAIN = PROBES + textwrap.dedent('''
    def pids_test(n):
        stop = threading.Event()
        threads, error = [], None
        try:
            for _ in range(n):
                t = threading.Thread(target=stop.wait, daemon=True)
                t.start()
                threads.append(t)
        except BaseException as e:
            error = type(e).__name__
        stop.set()
        for t in threads:
            t.join()
        return {"started": len(threads), "error": error}

    def memory_test(mb):
        p = subprocess.run([sys.executable, "-c", f"b = bytearray({mb} * 1024 * 1024); print(len(b))"],
                           capture_output=True, text=True)
        return {"returncode": p.returncode, "out": p.stdout.strip()}

    obs = observe(sys.argv[1])
    obs["tmp_exec"] = _try(lambda: (open("/tmp/x.sh", "w").write("#!/bin/sh\\necho exec-ok\\n"),
                                    os.chmod("/tmp/x.sh", 0o755),
                                    subprocess.run(["/tmp/x.sh"], capture_output=True, text=True).stdout.strip())[2])
    obs["pids_test"] = pids_test(%(pids)d + 50)
    obs["memory_test"] = memory_test(%(mem_mb)d + 512)
    obs["leaks"] = leaks(obs)
    print("PROBE " + json.dumps(obs), flush=True)
''')

HOSTILE_CANDIDATE = PROBES + textwrap.dedent('''
    import torch
    import torch.nn as nn

    _OBS = observe(%(host_ip)r)
    _LEAKS = leaks(_OBS)
    try:  # the only writable place: the container's tmpfs (gone with the container)
        with open("/tmp/kernelrl-hostile-observed.json", "w") as f:
            json.dump(_OBS, f)
    except OSError:
        pass
    sys.stderr.write("HOSTILE " + json.dumps({"leaks": _LEAKS}) + "\\n")


    class ModelNew(nn.Module):
        def forward(self, x):
            out = x * torch.sigmoid(x)
            return out + 1.0 if _LEAKS else out  # wrong answer if anything leaked: `correct` proves nothing did
''')

FORK_BOMB = textwrap.dedent('''
    import os
    import torch
    import torch.nn as nn


    class ModelNew(nn.Module):
        def forward(self, x):
            for _ in range(10000):
                try:
                    if os.fork() == 0:
                        import time
                        time.sleep(600)
                        os._exit(0)
                except OSError:
                    break
            return x * torch.sigmoid(x)
''')


def host_ip() -> str:
    """The host's own non-loopback address (a container with host networking could reach Postgres on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent for UDP connect
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def why(res: dict) -> str:
    """A failed result's reason first (pytest cuts a long dict's repr before the error)."""
    return f"flags={res.get('flags')} error={res.get('error')!r} log={str(res.get('log', ''))[-2000:]!r} result={res}"


def cpu_spec(image: str, job_dir: Path, **kw) -> dict:
    """The evaluator's own container spec without the GPU request (CPU machine)."""
    from kernelrl.evaluation.docker_sandbox import container_spec

    spec = container_spec(image, "GPU-00000000-cpu-test", job_dir=job_dir, mem_limit=MEM, pids_limit=PIDS,
                          tmpfs_size="512m", **kw)
    assert spec["device_requests"]  # GPU pinning by UUID is part of the spec; dropped only because there is no GPU
    spec.pop("device_requests")
    return spec


@pytest.fixture(autouse=True)
def planted_secrets(monkeypatch):
    """Secrets in the evaluating process's environment: none may reach the container."""
    for k, v in PLANTED.items():
        monkeypatch.setenv(k, v)


@pytest.fixture
def cpu_sandbox(monkeypatch):
    """``run_in_container`` with the CPU spec (same as the GPU one minus the device request)."""
    from kernelrl.evaluation import docker_sandbox

    original = docker_sandbox.container_spec

    def spec(image, gpu_uuid, **kw):
        s = original(image, gpu_uuid, **kw)
        s.pop("device_requests", None)
        return s

    monkeypatch.setattr(docker_sandbox, "container_spec", spec)
    return docker_sandbox


def eval_settings(**kw) -> dict:
    from kernelrl.config.stages import EvalConfig

    base = dict(device="cpu", budget_s=0.4, correctness_trials=3, reverify=False, max_wall_s=90,
                timeout_factor=50.0, spread_threshold=10.0, memory_limit_mb=4096)
    cfg = EvalConfig(**{**base, **kw})
    return dataclasses.asdict(cfg)


def test_container_boundaries_seen_from_inside(docker_engine, step_image, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    job.chmod(0o755)
    (job / "probe.py").write_text(PROBE_MAIN % {"pids": PIDS, "mem_mb": 2048})
    (job / "probe.py").chmod(0o644)
    spec = cpu_spec(step_image, job)
    spec.update(entrypoint=["python"], command=["/job/probe.py", host_ip()])
    t0 = time.monotonic()
    c = docker_engine.containers.run(**spec)
    try:
        status = c.wait(timeout=300)
        c.reload()
        hc, cfg = c.attrs["HostConfig"], c.attrs["Config"]
        logs = c.logs(stdout=True, stderr=True).decode(errors="replace")
    finally:
        c.remove(force=True)
    dt = time.monotonic() - t0
    lines = [ln for ln in logs.splitlines() if ln.startswith("PROBE ")]
    assert status["StatusCode"] == 0 and lines, logs[-3000:]
    obs = json.loads(lines[-1][len("PROBE "):])

    # from outside: what the engine was asked for
    assert hc["NetworkMode"] == "none" and hc["ReadonlyRootfs"] is True and hc["CapDrop"] == ["ALL"]
    assert hc["PidsLimit"] == PIDS and hc["Memory"] == 2 * 1024 ** 3 and hc["MemorySwap"] == hc["Memory"]
    assert "no-new-privileges" in hc["SecurityOpt"] and not hc.get("Privileged")
    assert not [e for e in cfg["Env"] if "planted" in e]

    # from inside: nothing reachable, nothing secret, nothing writable but the tmpfs, limits in force
    assert obs["leaks"] == [], json.dumps(obs, indent=1)
    assert all(r == "denied" for r, _ in obs["net"].values()), obs["net"]
    assert obs["interfaces"] == ["lo"]
    assert obs["writes"]["/tmp"][0] == "ok" and obs["tmp_exec"] == ["ok", "exec-ok"]  # rw,exec tmpfs
    assert all(obs["writes"][p][0] == "denied" for p in obs["writes"] if p != "/tmp"), obs["writes"]
    assert obs["uid"] == 10001 and int(obs["cap_eff"], 16) == 0 and obs["no_new_privs"] == "1"
    assert not [n for n in obs["env_names"] if n.startswith("AWS_") or n in PLANTED]
    assert int(obs["memory_limit"]) == 2 * 1024 ** 3 and int(obs["pids_limit"]) == PIDS
    assert obs["pids_test"]["error"] and obs["pids_test"]["started"] < PIDS  # threads count against pids
    assert obs["memory_test"]["returncode"] != 0  # 2.5 GB in a 2 GB container: OOM-killed
    print(f"\ndocker: sandbox probe container {dt:.1f} s")


def test_hostile_candidate_result_comes_back(docker_engine, step_image, cpu_sandbox):
    from kernelrl.tasks import get_task

    task = get_task("09_Swish")
    src = HOSTILE_CANDIDATE % {"host_ip": host_ip()}
    t0 = time.monotonic()
    res = cpu_sandbox.run_in_container(step_image, "GPU-00000000-cpu-test", task.source, src, eval_settings(),
                                       client=docker_engine, mem_limit=MEM, pids_limit=PIDS, tmpfs_size="512m",
                                       timeout_s=300)
    dt = time.monotonic() - t0
    assert res["sandbox"]["docker"]["network"] == "none"
    assert res["executable"] is True and res["correct"] is True, why(res)  # correct only if nothing leaked
    print(f"\nhostile candidate result: speedup={res['speedup']} flags={res['flags']} error={res.get('error')}")
    assert not docker_engine.containers.list(all=True, filters={"label": "kernelrl.role=evaluation"})
    print(f"\ndocker: hostile candidate evaluated in a container in {dt:.1f} s (speedup {res['speedup']})")


def test_timing_blocks_fit_the_container_memory(docker_engine, step_image, cpu_sandbox):
    """Long spans ask for many calls per span; the sets a block stages must still fit the container (2 GB here).
    A fixed 2 GB per worker got both workers OOM-killed mid-timing on a fast CPU (reported reference-disturbed)."""
    from kernelrl.tasks import get_task

    task = get_task("09_Swish")  # 16 MB in, 16 MB out per call
    cand = "import torch, torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
           "        return x * torch.sigmoid(x)\n"
    res = cpu_sandbox.run_in_container(step_image, "GPU-00000000-cpu-test", task.source, cand,
                                       eval_settings(budget_s=0.2, min_rounds=4),
                                       client=docker_engine, mem_limit=MEM, pids_limit=PIDS, tmpfs_size="512m",
                                       timeout_s=300)
    assert res["executable"] is True and res["correct"] is True and res["speedup"] > 0, why(res)
    k, spans = res["timing"]["calls_per_round"], res["timing"]["spans_per_block"]
    staged = k * spans * 32 * 2**20  # sets x (input + output) per worker
    assert k >= 1 and spans >= 2 and 2 * staged <= 0.5 * 2 * 2**30, (k, spans, why(res))
    print(f"\ndocker: a block in a 2 GB container staged {k} x {spans} sets ({staged / 2**20:.0f} MB per worker)")


def test_fork_bomb_candidate_result_comes_back(docker_engine, step_image, cpu_sandbox):
    from kernelrl.tasks import get_task

    task = get_task("09_Swish")
    t0 = time.monotonic()
    res = cpu_sandbox.run_in_container(step_image, "GPU-00000000-cpu-test", task.source, FORK_BOMB,
                                       eval_settings(), client=docker_engine, mem_limit=MEM, pids_limit=PIDS,
                                       tmpfs_size="512m", timeout_s=300)
    dt = time.monotonic() - t0
    # scored, not lost: the evaluator saw the forks (whether they cost the score is its policy: see its red team)
    assert {"spawns-processes", "leftover-processes", "timeout"} & set(res["flags"]), res
    assert not docker_engine.containers.list(all=True, filters={"label": "kernelrl.role=evaluation"})
    print(f"\ndocker: fork-bomb candidate -> correct={res['correct']} flags={res['flags']} in {dt:.1f} s")


def test_evaluator_image_sandbox_hostile_candidate(docker_engine, evaluator_image, cpu_sandbox):
    """The evaluation developer's image (its non-root `evaluator` user, its kernelrl install) runs the sandbox."""
    from kernelrl.tasks import get_task

    img = docker_engine.images.get(evaluator_image)
    assert img.attrs["Config"]["User"] == "10001:10001"
    task = get_task("09_Swish")
    res = cpu_sandbox.run_in_container(evaluator_image, "GPU-00000000-cpu-test", task.source,
                                       HOSTILE_CANDIDATE % {"host_ip": host_ip()}, eval_settings(),
                                       client=docker_engine, mem_limit=MEM, pids_limit=PIDS, tmpfs_size="512m",
                                       timeout_s=300)
    assert res["executable"] is True and res["correct"] is True, why(res)
    assert res["sandbox"]["docker"]["image"] == evaluator_image
