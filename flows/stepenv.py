"""What a step's environment may hold: an allow-list, and secrets only for the stages that need them.

The environment a step sees (``step_env``): ``KERNELRL_*`` settings, PATH/HOME/locale, offline Hugging Face
switches, thread counts, ``VLLM_*``/``NCCL_*`` tuning. A variable whose name looks like a secret (``*KEY*``,
``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``) passes only to the stages listed for it in ``STAGE_SECRETS``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

# Variables passed by exact name. Why each: PATH/HOME/locale for any process; HF/transformers offline
# switches and cache locations so a step never downloads unexpectedly; thread counts (2 busy cores here:
# threads fight); CA bundles for S3/HTTPS endpoints with private CAs; CUDA_VISIBLE_DEVICES for local GPU
# pinning.
PASS_NAMES = frozenset({
    "PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "VIRTUAL_ENV",
    "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "TOKENIZERS_PARALLELISM",
    "HF_HOME", "HF_HUB_CACHE", "TRANSFORMERS_CACHE", "TORCH_HOME", "XDG_CACHE_HOME", "TRITON_CACHE_DIR",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTORCH_CUDA_ALLOC_CONF",
})
# Variables passed by prefix: kernelrl's own settings, and engine tuning knobs (vLLM, NCCL).
PASS_PREFIXES = ("KERNELRL_", "VLLM_", "NCCL_")
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# Secret-looking variables and the stages that need them; everything else secret-looking is dropped.
_S3_STAGES = frozenset({"augment", "sft", "selfsup", "crl", "bench"})  # any stage may read/write checkpoints
STAGE_SECRETS: dict[str, frozenset[str]] = {
    "KERNELRL_LLM_API_KEY": frozenset({"augment"}),  # teacher LLMs (paid API): augmentation only
    "KERNELRL_S3_ACCESS_KEY_ID": _S3_STAGES,
    "KERNELRL_S3_SECRET_ACCESS_KEY": _S3_STAGES,
}



def step_env(stage: str, environ: Mapping[str, str] | None = None, *, extra: Mapping[str, str] | None = None,
             secrets: Mapping[str, Iterable[str]] | None = None) -> dict[str, str]:
    """The allow-listed environment for a step of ``stage`` (see the module docstring)."""
    environ = os.environ if environ is None else environ
    secrets = STAGE_SECRETS if secrets is None else secrets
    env: dict[str, str] = {}
    for name, value in environ.items():
        if not (name in PASS_NAMES or name.startswith(PASS_PREFIXES)):
            continue
        if _SECRET_NAME.search(name) and stage not in set(secrets.get(name, ())):
            continue
        env[name] = value
    env["PYTHONUNBUFFERED"] = "1"  # lines reach the flow's log as they are printed
    env.update(extra or {})
    return env



def settings_env(settings) -> dict[str, str]:
    """``KERNELRL_*`` variables for every set value of a Settings object (secrets included: filter them)."""
    out: dict[str, str] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if value is None or value == []:
            continue
        if hasattr(value, "get_secret_value"):
            value = value.get_secret_value()
        elif isinstance(value, Path):
            value = str(value.resolve())
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        out[f"KERNELRL_{name.upper()}"] = str(value)
    return out
