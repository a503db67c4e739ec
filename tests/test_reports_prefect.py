"""A report published from inside a real Prefect flow run becomes artifacts (Markdown + tables) on the server."""

from __future__ import annotations

import asyncio
import os

import pytest

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")


@pytest.fixture(scope="module")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):  # a cold 2-core machine can take a minute
        yield


def test_report_becomes_prefect_artifacts(prefect_server, tmp_path):
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from kernelrl.reports import artifacts
    from kernelrl.reports.report import Report, SourceResult, make_row

    ok = {"executable": True, "correct": True, "speedup": 2.0, "custom_kernel_built": True}
    rows = [make_row(source="seeds", task_key="builtin/L1/02_Softmax", task="02_Softmax", level=1, result=ok,
                     code="import triton\n"),
            make_row(source="seeds", task_key="builtin/L2/08_X", task="08_X", level=2, result=None, code=None,
                     error="no candidate")]
    report = Report("Artifact Test Report", [SourceResult("seeds", "seeds", rows)], levels=[1, 2])
    paths = report.write(tmp_path / "r", plots=False)

    @flow
    def publish_flow() -> list[str]:
        return artifacts.publish_report_dir(tmp_path / "r")

    keys = publish_flow()
    assert keys == ["artifact-test-report", "artifact-test-report-summary", "artifact-test-report-tasks"]

    async def read():
        async with get_client() as c:
            arts = await c.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))
            return {a.key: a for a in arts}

    got = asyncio.run(read())
    assert got["artifact-test-report"].type == "markdown"
    assert "## Overall" in got["artifact-test-report"].data and paths["markdown"].read_text() == got[
        "artifact-test-report"].data
    assert got["artifact-test-report-summary"].type == "table" and got["artifact-test-report-tasks"].type == "table"
    assert "02_Softmax" in str(got["artifact-test-report-tasks"].data)
    # outside a flow: nothing is published
    assert artifacts.publish(report) == []
