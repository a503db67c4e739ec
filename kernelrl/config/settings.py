"""Environment settings: where things live (store, checkpoints, GPUs, LLM endpoints).

Read from environment variables with the prefix ``KERNELRL_`` (and a ``.env`` file if present), e.g.

    KERNELRL_STORE_URL=postgresql+psycopg2://kernelrl@127.0.0.1:5432/kernelrl
    KERNELRL_CHECKPOINT_URI=s3://kernelrl-checkpoints/runs
    KERNELRL_S3_ENDPOINT_URL=http://127.0.0.1:9000
    KERNELRL_GPU_IDS=0,1            (indices or GPU-<uuid>)
    KERNELRL_LLM_BASE_URL=https://api.deepseek.com/v1  KERNELRL_LLM_API_KEY=...

Secrets are ``SecretStr`` so they never print; ``Settings.redacted()`` is what logs and manifests may show.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from typing import Annotated

from kernelrl.errors import ConfigError

_PASSWORD_IN_URL = re.compile(r"(://[^:/@]+:)([^@]+)(@)")


def url_passwords(text: str) -> list[str]:
    """The password parts of the URLs in ``text`` (what ``redact_url`` hides)."""
    return [m.group(2) for m in _PASSWORD_IN_URL.finditer(text)]


def redact_url(url: str | None) -> str | None:
    """Hide the password part of a URL (``postgresql://u:secret@h/db`` -> ``postgresql://u:***@h/db``)."""
    if url is None:
        return None
    return _PASSWORD_IN_URL.sub(r"\1***\3", url)


TRACKERS = ("tensorboard", "wandb", "mlflow")


def normalize_store_url(v: str | None) -> str | None:
    """The one rule for store URLs, from settings or a command-line flag: ``postgresql://`` and ``postgres://``
    mean psycopg2 (SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3, which we do not ship); anything but
    SQLite or Postgres is refused."""
    if v is None:
        return v
    if v.startswith("postgresql://") or v.startswith("postgres://"):
        v = "postgresql+psycopg2://" + v.split("://", 1)[1]
    if not (v.startswith("sqlite") or v.startswith("postgresql+psycopg2://")):
        raise ValueError("must be a sqlite:/// or postgresql+psycopg2:// URL")
    return v


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KERNELRL_", env_file=".env", extra="ignore")

    home: Path = Field(
        Path(".kernelrl"),
        description="State directory of the embedded default: SQLite store, local checkpoints, caches.",
    )
    store_url: str | None = Field(
        None,
        description="SQLAlchemy URL of the exemplar store. Default: SQLite file <home>/store.db. "
        "Postgres: postgresql+psycopg2://user[:password]@host:5432/db",
    )
    checkpoint_uri: str | None = Field(
        None, description="Checkpoint store: a local directory (default <home>/checkpoints) or s3://bucket/prefix."
    )
    s3_endpoint_url: str | None = Field(None, description="S3 endpoint for MinIO or another S3-compatible store.")
    s3_access_key_id: SecretStr | None = Field(None, description="S3 access key (else boto3's default chain).")
    s3_secret_access_key: SecretStr | None = Field(None, description="S3 secret key (else boto3's default chain).")
    s3_region: str = Field("us-east-1", description="S3 region name; MinIO ignores it but boto3 needs one.")
    gpu_ids: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="GPUs this deployment may use, as CUDA indices or GPU-<uuid>, comma separated. Empty: all visible.",
    )
    llm_base_url: str | None = Field(None, description="Default OpenAI-compatible endpoint for teachers/optimize.")
    llm_api_key: SecretStr | None = Field(None, description="API key for llm_base_url.")
    llm_model: str | None = Field(None, description="Default model name at llm_base_url.")
    kernelbench_dir: Path | None = Field(None, description="A KernelBench checkout (its KernelBench/ folder).")
    log_level: str = Field("INFO", description="Python logging level for steps, flows and workers.")
    # Trackers, as trl users know them (TrainingArguments.report_to): the full per-step metrics go there, the
    # console gets one short line every log_every steps. TensorBoard event files are the default because they
    # need no account or server; "wandb"/"mlflow" are passed to transformers (configured by their own env vars).
    report_to: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["tensorboard"],
        description="Trackers for training metrics, comma separated: tensorboard (files under <home>/runs/<run>/"
        "<stage>/tb), wandb, mlflow; 'none' for none.",
    )
    log_every: int = Field(
        10, ge=1, description="Training steps per console progress line (the first and last step always print).")

    @field_validator("gpu_ids", mode="before")
    @classmethod
    def _split_gpu_ids(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [s.strip() for s in v.split(",") if s.strip()]
        return v

    @field_validator("report_to", mode="before")
    @classmethod
    def _split_report_to(cls, v: Any) -> Any:
        items = [s.strip().lower() for s in v.split(",")] if isinstance(v, str) else [str(s).lower() for s in v]
        items = [s for s in items if s and s != "none"]
        bad = [s for s in items if s not in TRACKERS]
        if bad:
            raise ValueError(f"unknown tracker {bad[0]!r}: expected {', '.join(TRACKERS)} or none")
        return items

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        v = v.upper()
        if v not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return v

    @field_validator("store_url")
    @classmethod
    def _store_url(cls, v: str | None) -> str | None:
        return normalize_store_url(v)

    # -- derived values -------------------------------------------------------------------------------------
    @property
    def resolved_store_url(self) -> str:
        if self.store_url:
            return self.store_url
        return f"sqlite:///{(self.home / 'store.db').resolve()}"

    @property
    def resolved_checkpoint_uri(self) -> str:
        if self.checkpoint_uri:
            return self.checkpoint_uri
        return str((self.home / "checkpoints").resolve())

    def redacted(self) -> dict[str, Any]:
        """A dict safe for logs, manifests and artifacts: secrets and URL passwords hidden."""
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                out[name] = "***" if value.get_secret_value() else None
            elif isinstance(value, str):
                out[name] = redact_url(value)
            elif isinstance(value, Path):
                out[name] = str(value)
            else:
                out[name] = value
        out["store_url"] = redact_url(self.resolved_store_url)
        out["checkpoint_uri"] = self.resolved_checkpoint_uri
        return out


def load_settings(**overrides: Any) -> Settings:
    """Build Settings from the environment; a bad value raises ConfigError naming the variable."""
    try:
        return Settings(**overrides)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "?"
        raise ConfigError(f"setting KERNELRL_{field.upper()}: {err['msg']}") from None


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings (cached). Tests that change the environment call ``get_settings.cache_clear()``."""
    return load_settings()
