"""The Python SDK over real HTTP: ``paddlecloud.train(...)`` in one call, as in the seed's ``dist.train``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import paddlecloud

from .conftest import Server, write_package

pytestmark = pytest.mark.e2e


def test_train_helper_runs_a_job_to_the_end(server: Server, tmp_path: Path) -> None:
    cfg = yaml.safe_load(Path(server.env["PADDLECLOUD_CONFIG"]).read_text())
    dc = cfg["datacenters"][cfg["current"]]
    client = paddlecloud.Client(dc["endpoint"], dc["token"])
    code = (
        "import os\nopen(os.path.join(os.environ['PADDLECLOUD_OUTPUT_DIR'], 'model.txt'), 'w').write('w=2')\n"
    )
    pkg = write_package(tmp_path / "sdk_job", {"save.py": code})
    job = paddlecloud.train(pkg, entry="python save.py", trainers=1, cpu="100m", wait=True, timeout=60,
                            client=client)  # fmt: skip
    assert job.name == "sdk-job"  # from the directory's name, made DNS-1123
    assert job.phase == "Succeeded"
    assert (Path(job.output_dir) / "model.txt").read_text() == "w=2"
    assert [line for line in client.logs("sdk-job")] == []  # it printed nothing
    client.delete("sdk-job")
    with pytest.raises(paddlecloud.api.NotFound):
        client.job("sdk-job")
