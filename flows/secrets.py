"""Secrets for deployed flows, from Prefect Secret blocks at run time (never in prefect.yaml or job variables).

A deployment sets ``KERNELRL_PREFECT_SECRETS=1`` in its flow container; the stage task then fills each setting
below that the environment does not already have from the Secret block of that name. The step runners still
pass each secret only to the stages that need it (flows.runner.STAGE_SECRETS). Create the blocks once:

    prefect block create secret   # or in Python:
    from prefect.blocks.system import Secret
    Secret(value="postgresql+psycopg2://kernelrl:...@127.0.0.1:5432/kernelrl").save("kernelrl-store-url")
"""

from __future__ import annotations

import logging
import os

SECRET_BLOCKS = {
    "KERNELRL_STORE_URL": "kernelrl-store-url",
    "KERNELRL_S3_ACCESS_KEY_ID": "kernelrl-s3-access-key",
    "KERNELRL_S3_SECRET_ACCESS_KEY": "kernelrl-s3-secret-key",
    "KERNELRL_LLM_API_KEY": "kernelrl-llm-api-key",
}
log = logging.getLogger(__name__)


def apply_prefect_secrets(environ=None) -> list[str]:
    """Fill missing secret settings from Prefect Secret blocks when KERNELRL_PREFECT_SECRETS=1; returns names set."""
    environ = os.environ if environ is None else environ
    if environ.get("KERNELRL_PREFECT_SECRETS", "").lower() not in ("1", "true", "yes"):
        return []
    from prefect.blocks.system import Secret

    done = []
    for var, block in SECRET_BLOCKS.items():
        if environ.get(var):
            continue
        try:
            value = Secret.load(block).get()
        except Exception as e:  # a block that does not exist: that setting stays unset (e.g. no LLM key)
            log.debug("secret block %s not loaded: %s", block, e)
            continue
        if value:
            environ[var] = str(value)
            done.append(var)
    return done
