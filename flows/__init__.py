"""Prefect flows over containerised steps.

- ``flows.runner``: step runners (``LocalProcessRunner``, ``DockerRunner``), ``StepFailed``, the env allow-list
  and the ``KERNELRL_MANIFEST`` / ``KERNELRL_PROGRESS`` output conventions.
- ``flows.stages``: one Prefect task per stage (store-based skip keys, retries with backoff, artifacts) and a
  flow per stage (``augment_flow`` ... ``bench_flow``) for per-stage deployments.
- ``flows.pipeline``: the ``pipeline`` flow (augment -> sft -> selfsup -> crl -> bench); ``kernelrl pipeline run``.
- ``flows.secrets``: secrets from Prefect Secret blocks for deployed flows.
- ``flows.cli``: the ``kernelrl pipeline`` command (registered through the ``kernelrl.cli`` entry points).
"""
