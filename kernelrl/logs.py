"""Logging for entrypoints: one format, quiet libraries, and no secret in any record.

    from kernelrl.logs import configure_logging
    configure_logging("INFO", "%(asctime)s sft %(levelname)s %(message)s", settings)

Every step, worker and CLI command that logs calls this once. Two things beyond ``logging.basicConfig``:

- **Redaction.** A filter on the root handlers replaces every secret value it knows (the settings' secret
  fields, the password of the store URL, and the values of secret-looking environment variables such as
  ``AWS_SECRET_ACCESS_KEY``) with ``***`` in each record before it is written. A library that logs a header or
  a connection string at DEBUG (botocore logs the S3 access key id in its signed headers) therefore cannot put
  a credential into step logs, which the flows stream into Prefect's logs and database.
- **Quiet libraries.** Alembic's per-migration INFO lines and the HTTP/S3 clients' chatter are held at WARNING
  unless the level asked for is DEBUG: a step's log is about the step.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote

from kernelrl.config.settings import url_passwords

# Libraries whose INFO lines are noise in a step's log (shown again at DEBUG).
NOISY = ("alembic", "botocore", "boto3", "s3transfer", "urllib3", "httpx", "httpcore", "filelock")
# Environment variables whose values are credentials whatever their prefix.
_SECRET_ENV = re.compile(r"(PASSWORD|SECRET|TOKEN|API_KEY|ACCESS_KEY|CREDENTIAL)", re.I)
_MIN_LEN = 4  # shorter "secrets" (e.g. a password "pw") would blank out ordinary words


def secret_values(settings: Any = None, environ: dict[str, str] | None = None) -> list[str]:
    """The credential strings a log record must never show, longest first."""
    env = os.environ if environ is None else environ
    found: set[str] = set()
    if settings is not None:
        for name in type(settings).model_fields:
            value = getattr(settings, name, None)
            if hasattr(value, "get_secret_value"):
                found.add(value.get_secret_value() or "")
            elif isinstance(value, str):
                found.update(url_passwords(value))
    for key, value in env.items():
        if _SECRET_ENV.search(key):
            found.add(value)
        elif "://" in value:
            found.update(url_passwords(value))
    out: set[str] = set()
    for s in found:
        if s and len(s) >= _MIN_LEN:
            out.update({s, quote(s, safe=""), unquote(s)})
    return sorted((s for s in out if len(s) >= _MIN_LEN), key=len, reverse=True)


class RedactSecrets(logging.Filter):
    """Replaces known secret values in a record's rendered message (and its exception text) with ``***``."""

    def __init__(self, secrets: Iterable[str]):
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def redact(self, text: str) -> str:
        for s in self.secrets:
            if s in text:
                text = text.replace(s, "***")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        try:
            msg = record.getMessage()
        except Exception:  # a bad format string is the library's bug, not a reason to leak or drop
            msg = str(record.msg)
        clean = self.redact(msg)
        if clean != msg:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True


def configure_logging(level: str | int, fmt: str, settings: Any = None, stream=None) -> RedactSecrets:
    """``basicConfig`` plus the redaction filter on every root handler, and noisy libraries held at WARNING."""
    kw = {"stream": stream} if stream is not None else {}
    logging.basicConfig(level=level, format=fmt, **kw)
    numeric = logging.getLevelName(level) if isinstance(level, str) else level
    if not isinstance(numeric, int) or numeric > logging.DEBUG:
        for name in NOISY:
            logging.getLogger(name).setLevel(logging.WARNING)
    filt = RedactSecrets(secret_values(settings))
    for handler in logging.getLogger().handlers:
        for old in [f for f in handler.filters if isinstance(f, RedactSecrets)]:
            handler.removeFilter(old)
        handler.addFilter(filt)
    return filt
