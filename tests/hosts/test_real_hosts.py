"""What breaks only once nodes have their own addresses and disks (issue 25), on the bed: the
server on head, the CLI on the laptop, the workers on c1..c3.

- ``up --host 0.0.0.0`` without ``--api-url``: the workers get head's name, which they resolve and
  reach (before: ``http://127.0.0.1:PORT``, each worker's own host, and no task master);
- a data dir the nodes cannot see (head's private ``/tmp``) is refused by ``up``, naming the nodes
  (before: accepted, and every worker vanished ``Lost``);
- the laptop's ``get workers -o wide`` names logs, never a path on the server's disk.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from tests.hosts.conftest import COMPUTE, Bed
from tests.hosts.platform import PADDLECLOUD, PORT, BedPlatform, wait_phase

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(600)]

#: asks the API at the URL the worker was given (from its sandbox: through the job's relay, which
#: connects to that host and port from the node)
PROGRAM = """\
import os
from paddlecloud.runtime.apiclient import opener
api = os.environ["PADDLECLOUD_API"]
with opener(os.environ.get("PADDLECLOUD_API_CA", "")).open(api + "/api/v1/health", timeout=10) as r:
    print("api", api, "answers", r.status, flush=True)
"""


def test_a_server_bound_to_every_address_gives_workers_a_url_they_reach(bed: Bed, tmp_path: Path) -> None:
    p = BedPlatform(bed, host="0.0.0.0", port=PORT + 1)
    try:
        said = p.log.read_text()
        assert f"workers reach it at http://head:{PORT + 1}" in said, said[-2000:]
        package = p.laptop_package("api-probe", PROGRAM)
        p.cli("submit", package, "--name", "api", "--entry", "python main.py", "--trainers", "2",
              "--cpu", "5")  # fmt: skip
        job = wait_phase(p, "api", ("Succeeded", "Failed"), timeout=300)
        assert job["phase"] == "Succeeded", (job["message"], p.cli("logs", "api")[-3000:])
        out = p.cli("logs", "api")
        assert out.count(f"api http://head:{PORT + 1} answers 200") == 2, out[-3000:]
        workers = p.json("get", "workers", "api")["items"]
        assert {w["node"] for w in workers} <= set(COMPUTE) and len({w["node"] for w in workers}) == 2
        wide = p.cli("get", "workers", "api", "-o", "wide")
        assert str(p.base) not in wide and "trainer-0.0.log" in wide, wide  # its name, no server path
        assert all("/" not in w["log"] for w in workers), workers
    finally:
        p.close()


def test_a_data_dir_the_nodes_cannot_see_is_refused_naming_them(bed: Bed) -> None:
    private = f"/tmp/pc-private-{uuid.uuid4().hex[:8]}"  # head's own /tmp: no compute host has it
    argv = bed.argv("head", PADDLECLOUD, "up", "--backend", "slurm", "--host", bed.addresses["head"],
                    "--port", str(PORT + 2), "--data-dir", private)  # fmt: skip
    env = bed.environ({"PADDLECLOUD_CONFIG": f"{private}-config"})
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert r.returncode != 0, r.stdout[-2000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "Slurm nodes c1, c2, c3 cannot see" in r.stderr and "--data-dir" in r.stderr, r.stderr[-2000:]
    assert private in r.stderr
