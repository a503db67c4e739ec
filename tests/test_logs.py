"""kernelrl.logs: secrets never reach a log line, noisy libraries are quiet at INFO."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_secret_values_from_settings_and_environment(monkeypatch):
    from kernelrl.config.settings import load_settings
    from kernelrl.logs import secret_values

    monkeypatch.setenv("KERNELRL_STORE_URL", "postgresql+psycopg2://u:pg-pass/w0rd@127.0.0.1:5432/db")
    monkeypatch.setenv("KERNELRL_S3_SECRET_ACCESS_KEY", "s3-secret-value")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAPLANTED")
    monkeypatch.setenv("SOME_URL", "https://user:url-pass@example.invalid/x")
    monkeypatch.setenv("KERNELRL_LLM_API_KEY", "pw")  # too short to redact safely: ignored
    found = secret_values(load_settings())
    assert {"pg-pass/w0rd", "pg-pass%2Fw0rd", "s3-secret-value", "AKIAPLANTED", "url-pass"} <= set(found)
    assert "pw" not in found and "u" not in found
    assert found == sorted(found, key=len, reverse=True)  # longest first: no partial replacement


def test_redaction_in_a_real_process(tmp_path):
    """A child that configures logging like a step and logs secrets (message, args, exception, DEBUG library)."""
    code = r'''
import logging, sys
from kernelrl.config.settings import load_settings
from kernelrl.logs import configure_logging
configure_logging("DEBUG", "%(levelname)s %(name)s %(message)s", load_settings(), stream=sys.stdout)
logging.getLogger("botocore.endpoint").debug("Sending headers: Credential=%s/20261124", "AKIAPLANTED42")
logging.getLogger("kernelrl.x").info("store at %s", "postgresql+psycopg2://u:Sekret-PW@h/db")
try:
    raise RuntimeError("token s3-secret-value in an exception")
except RuntimeError:
    logging.getLogger("kernelrl.x").exception("failed")
logging.getLogger("kernelrl.x").info("plain line")
'''
    env = {"PATH": "/usr/bin:/bin", "KERNELRL_HOME": str(tmp_path),
           "KERNELRL_STORE_URL": "postgresql+psycopg2://u:Sekret-PW@h/db",
           "KERNELRL_S3_ACCESS_KEY_ID": "AKIAPLANTED42", "KERNELRL_S3_SECRET_ACCESS_KEY": "s3-secret-value"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    for secret in ("AKIAPLANTED42", "Sekret-PW", "s3-secret-value"):
        assert secret not in out, out
    assert "Credential=***/20261124" in out and "u:***@h/db" in out and "token *** in an exception" in out
    assert "plain line" in out


def test_noisy_libraries_quiet_at_info():
    from kernelrl.logs import NOISY, configure_logging

    saved = {n: logging.getLogger(n).level for n in NOISY}
    try:
        configure_logging("INFO", "%(message)s")
        assert all(logging.getLogger(n).getEffectiveLevel() >= logging.WARNING for n in NOISY)
    finally:
        for n, lvl in saved.items():
            logging.getLogger(n).setLevel(lvl)
        for h in logging.getLogger().handlers:
            for f in list(h.filters):
                h.removeFilter(f)
