"""The examples across hosts of the bed, as a user runs them: the CLI on ``laptop`` against the server
on ``head`` (``up --backend slurm``), over HTTP only; every worker a Slurm batch job on c1..c3, in
its sandbox. examples/fit_a_line (2 pservers + 2 trainers, PaddlePaddle parameter-server mode, its
8 shards leased from the task master) and the elastic torch example (torchrun agents around the
platform's rendezvous store) run at once (the module's ``jobs``: their start-ups overlap), in the
test bed's training image (``--image``: pulled on head into the shared directory from a registry
inside head, torch and PaddlePaddle in it; each worker shows it ran there), each with its workers on
at least two hosts, talking across the bed's bridge, and each reaches its stated loss / accuracy.
Then examples/paddle_collective (Paddle 3.x fleet data parallel, gloo) on 2 hosts, against 1
trainer, without an image: its environment built offline on head into the shared directory (as
tests/hosts/test_node_failure.py's jobs are).

Sizes, on compute hosts of 8 CPUs (``ensure-hosts.sh``): fit_a_line's trainers ``--cpu 5`` (one per
host), pservers 1; the torch trainers ``--cpu 3`` (at most two per host); 22 of the 24 CPUs with the
rendezvous store's one."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.conftest import COMPUTE, Bed
from tests.hosts.platform import BedPlatform, elapsed, wait_phase
from tests.registry_bed import PROOF, assert_ran_in_image

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PASSES = 3
#: a job's longest run here: both environments built at once on 2 cores, then the training
JOB_TIMEOUT_S = 600


#: the registry the image test pulls from: inside head, on head's address (no host reaches this
#: machine's loopback), its state where head sees it (the hosts' /tmp are their own)
REGISTRY_PLACE = {
    "PADDLECLOUD_REGISTRY_PORT": "5030",
    "PADDLECLOUD_REGISTRY_DIR": "/var/lib/paddlecloud-registry-hosts",
}


@pytest.fixture(scope="module")
def platform(bed: Bed, request: pytest.FixtureRequest) -> Iterator[BedPlatform]:
    t0, failed = time.monotonic(), request.session.testsfailed
    # the image test's registry is inside head, on its address: plain HTTP, as a site's own may be
    p = BedPlatform(
        bed, "--insecure-registry", f"{bed.addresses['head']}:{REGISTRY_PLACE['PADDLECLOUD_REGISTRY_PORT']}"
    )
    print(f"\nplatform: up on head, logged in from the laptop: {elapsed(t0)}")
    try:
        yield p
    finally:
        p.close(keep=request.session.testsfailed > failed)


@pytest.fixture(scope="module")
def head_registry(bed: Bed) -> Iterator[str]:
    """The test bed's training image (torch, PaddlePaddle: ``scripts/ensure-registry.sh``) on a
    registry started inside head; its reference. The image is built here first (the package mirrors
    are out of the hosts' reach), then pushed there from the machine's image cache."""
    script = str(Path(__file__).resolve().parents[2] / "scripts" / "ensure-registry.sh")
    built = subprocess.run(
        ["bash", script, "build"], capture_output=True, text=True, timeout=1200, check=False
    )
    assert built.returncode == 0, built.stderr[-2000:]
    env = {**REGISTRY_PLACE, "PADDLECLOUD_REGISTRY_HOST": bed.addresses["head"]}
    r = bed.run("head", "bash", script, "train", env=env, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    image = re.search(r"^export PADDLECLOUD_TRAIN_IMAGE=(\S+)$", r.stdout, re.M)
    assert image, r.stdout
    yield image.group(1)
    bed.run("head", "bash", script, "stop", env=env, check=False)


@pytest.fixture(scope="module")
def jobs(bed: Bed, platform: BedPlatform, head_registry: str) -> float:
    """Both examples submitted from the laptop in the training image, each worker's entry showing
    where it runs first (``registry_bed.PROOF``; fit_a_line's data set made there and uploaded over
    HTTP); the time they were submitted."""
    p = platform
    data = f"/tmp/{p.base.name}/dataset"
    bed.run("laptop", sys.executable, str(EXAMPLES / "fit_a_line" / "data.py"), data)
    p.cli("pfs", "cp", "-r", "-q", data, "pfs:data/fit-a-line")
    t0 = time.monotonic()
    p.cli(
        "submit", str(EXAMPLES / "fit_a_line"), "--name", "fit", "--framework", "paddle-ps",
        "--entry", f"{PROOF} && python train.py", "--pservers", "2", "--trainers", "2", "--cpu", "5",
        "--pscpu", "1", "--input", "pfs:data/fit-a-line", "--tasks-from-input", "--passes", str(PASSES),
        "--image", head_registry,
    )  # fmt: skip
    p.cli(
        "submit", str(EXAMPLES / "torch_ddp"), "--name", "elastic", "--framework", "torch",
        "--entry", f"{PROOF} && torchrun train.py", "--trainers", "3", "--min-instance", "1",
        "--max-instance", "3", "--cpu", "3", "--env", "PROGRESS_EVERY=10", "--image", head_registry,
    )  # fmt: skip
    return t0


def _in_the_image(p: BedPlatform, name: str, workers: tuple[str, ...]) -> None:
    """Each of ``workers`` ran in the training image, whose packages met the example's requirements
    in the job's venv (made by the image's Python)."""
    assert "already satisfied" in p.cli("logs", name, "-w", "prepare")
    for worker in workers:
        assert_ran_in_image(p.cli("logs", name, "-w", worker))


def _placement(p: BedPlatform, name: str) -> dict[str, tuple[str, str]]:
    """Each worker's node (Slurm's, from ``get workers`` on the laptop) and endpoint, checked
    against the bed: the node is a compute host and the endpoint's address is that host's."""
    where = {w["name"]: (w["node"], w["endpoint"]) for w in p.json("get", "workers", name)["items"]}
    for worker, (node, endpoint) in where.items():
        assert node in COMPUTE, (worker, node)
        assert endpoint.rpartition(":")[0] == p.bed.addresses[node], (worker, node, endpoint)
    return where


def test_fit_a_line_trains_across_hosts(platform: BedPlatform, jobs: float) -> None:
    p = platform
    job = wait_phase(p, "fit", ("Succeeded", "Failed"), timeout=JOB_TIMEOUT_S)
    assert job["phase"] == "Succeeded", (job["message"], p.cli("logs", "fit")[-3000:])
    where = _placement(p, "fit")
    assert where["trainer-0"][0] != where["trainer-1"][0], where  # --cpu 5 of 8: one per host
    tasks = p.json("get", "tasks", "fit")
    assert [(t["state"], t["done_passes"]) for t in tasks["items"]] == [("done", PASSES)] * 8
    m = re.search(r"final loss ([0-9.]+)$", p.cli("logs", "fit", "-w", "trainer-0"), re.M)
    assert m and float(m.group(1)) < 0.05, m  # noise floor 0.01; initial ~20
    assert (Path(job["output_dir"]) / "model" / "inference.pdmodel").is_file()
    _in_the_image(p, "fit", ("pserver-0", "pserver-1", "trainer-0", "trainer-1"))
    print(f"fit_a_line: final loss {m.group(1)}, workers {where}, {elapsed(jobs)} after its submit")


def test_elastic_torch_trains_across_hosts(platform: BedPlatform, jobs: float) -> None:
    p = platform
    job = wait_phase(p, "elastic", ("Succeeded", "Failed"), timeout=JOB_TIMEOUT_S)
    assert job["phase"] == "Succeeded", (job["message"], p.cli("logs", "elastic")[-3000:])
    where = _placement(p, "elastic")
    assert len({where[f"trainer-{i}"][0] for i in range(3)}) >= 2, where  # --cpu 3 of 8: two per host at most
    out = p.cli("logs", "elastic")
    # one group of all 3 trainers trained (the logs' lines carry their worker's name)
    assert re.search(r"^\[trainer-\d\] step \d+ epoch \d+ world 3 ", out, re.M), out[-3000:]
    acc = re.findall(r"final accuracy ([0-9.]+)$", out, re.M)
    assert acc and float(acc[-1]) >= 0.97, out[-3000:]
    _in_the_image(p, "elastic", ("trainer-0", "trainer-1", "trainer-2"))
    print(f"elastic torch: final accuracy {acc[-1]}, workers {where}, {elapsed(jobs)} after its submit")


def _collective(p: BedPlatform, name: str, trainers: int) -> list[float]:
    """examples/paddle_collective run to its end on ``trainers`` trainers of 5 CPUs (one per host);
    the loss of each epoch."""
    p.cli(
        "submit", str(EXAMPLES / "paddle_collective"), "--name", name, "--framework", "paddle-collective",
        "--entry", "python train.py", "--trainers", str(trainers), "--cpu", "5",
    )  # fmt: skip
    job = wait_phase(p, name, ("Succeeded", "Failed"), timeout=JOB_TIMEOUT_S)
    assert job["phase"] == "Succeeded", (job["message"], p.cli("logs", name)[-3000:])
    out = p.cli("logs", name, "-w", "trainer-0")
    acc = re.search(r"^final accuracy ([0-9.]+)$", out, re.M)
    assert acc and float(acc.group(1)) >= 0.97, out[-3000:]
    return [float(x) for x in re.findall(r"^epoch \d+ loss ([0-9.]+)$", out, re.M)]


@pytest.mark.timeout(2 * JOB_TIMEOUT_S)
def test_paddle_collective_trains_across_hosts_as_one_process_does(platform: BedPlatform) -> None:
    """Paddle 3.x collective data parallel (gloo) with its 2 trainers on 2 hosts, talking across the
    bed's bridge: the loss goes down, epoch by epoch the one the same job prints on 1 trainer."""
    p = platform
    t0 = time.monotonic()
    two = _collective(p, "collective", 2)
    where = _placement(p, "collective")
    assert where["trainer-0"][0] != where["trainer-1"][0], where  # --cpu 5 of 8: one per host
    one = _collective(p, "collective-1", 1)
    assert len(two) == len(one) == 8 and two[-1] < two[0] / 10, (two, one)
    assert two == pytest.approx(one, rel=1e-3), (two, one)
    print(f"paddle collective: losses {two}, workers {where}, {elapsed(t0)}")


#: what each of bob's workers tries from inside its sandbox: every endpoint of alice's job, then every
#: TCP port of every compute host's address that it can reach at all (an address whose host has no
#: worker of bob's leads nowhere in bob's own network: one attempt tells)
SCAN = """\
import errno, json, os, socket, time
from pathlib import Path

found, unreachable, scanned = [], [], []
for target in os.environ["TARGETS"].split(","):
    host, _, port = target.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        found.append(target)
    except OSError:
        pass
for host in os.environ["HOSTS"].split(","):
    probe = socket.socket()
    probe.settimeout(3)
    code = probe.connect_ex((host, 9))
    probe.close()
    if code not in (0, errno.ECONNREFUSED):
        unreachable.append(host)
        continue
    scanned.append(host)
    for port in range(1, 65536):
        s = socket.socket()
        s.settimeout(0.5)
        code = s.connect_ex((host, port))
        if code == 0 and s.getsockname() != s.getpeername():
            found.append(f"{host}:{port}")
        s.close()
        if code not in (0, errno.ECONNREFUSED):  # that host's worker of bob's is gone: so is the way
            unreachable.append(host)
            break
me = os.environ["PADDLECLOUD_WORKER"]
out = {"found": found, "unreachable": unreachable, "scanned": scanned}
done = Path(os.environ["PADDLECLOUD_OUTPUT_DIR"])
(done / f"{me}.json").write_text(json.dumps(out))
for _ in range(1200):  # keep this host's part of bob's network until every worker has scanned
    if len(list(done.glob("trainer-*.json"))) >= int(os.environ["PADDLECLOUD_TRAINERS"]):
        break
    time.sleep(0.1)
"""


def _phase(p: BedPlatform, name: str, config: str = "") -> str:
    return str(json.loads(p.cli("describe", name, "-o", "json", config=config))["phase"])


@pytest.mark.timeout(900)
def test_another_users_job_reaches_nothing_of_a_job_training_across_hosts(
    bed: Bed, platform: BedPlatform
) -> None:
    """alice's elastic torch job trains across hosts (its rendezvous store, torchrun agents, their
    process group), each of its hosts holding its network namespace, joined by its own VXLAN; bob's
    job, with workers on several hosts too, tries alice's endpoints and every port of every host it
    can reach: it reaches nothing of alice's (the hosts' addresses lead into bob's own namespaces)."""
    p = platform
    p.cli(
        "submit", str(EXAMPLES / "torch_ddp"), "--name", "long", "--framework", "torch",
        "--entry", "torchrun train.py", "--trainers", "3", "--min-instance", "2", "--max-instance", "3",
        "--cpu", "3", "--env", "EPOCHS=2000",
    )  # fmt: skip
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while " world 3 " not in p.cli("logs", "long"):  # training, in one group of 3 across hosts
        assert time.monotonic() < deadline, p.cli("logs", "long")[-3000:]
        time.sleep(3)
    workers = p.json("get", "workers", "long")["items"]
    targets = [w["endpoint"] for w in workers if w["endpoint"]]
    hosts = {w["node"] for w in workers}
    assert any(w["role"] == "rendezvous" for w in workers) and len(hosts & set(COMPUTE)) >= 2, workers
    for host in hosts:  # the job's namespace on each of its hosts, with the job's VXLAN
        each = "for n in $(ip netns list | awk '/^pcs-/ {print $1}'); do ip -n $n -d link; done"
        assert "vxlan id" in bed.out(host, "sh", "-c", each), host
    token = json.loads(p.cli("admin", "create-user", "bob", "-o", "json"))["token"]
    bob = f"/tmp/{p.base.name}/bob-config"
    p.cli("login", "--endpoint", p.url, "--token", token, "--user", "bob", config=bob)
    scan_dir = f"/tmp/{p.base.name}/scan"  # the package, made on the laptop
    write = (
        f"import pathlib; d = pathlib.Path({scan_dir!r}); d.mkdir(parents=True); "
        f"(d / 'scan.py').write_text({SCAN!r})"
    )
    bed.run("laptop", sys.executable, "-c", write)
    addresses = ",".join(bed.addresses[h] for h in COMPUTE)
    p.cli("submit", scan_dir, "--name", "scan", "--entry", "python scan.py", "--trainers", "3",
          "--cpu", "4", "--env", "TARGETS=" + ",".join(targets), "--env", f"HOSTS={addresses}",
          config=bob)  # fmt: skip
    deadline = time.monotonic() + 600
    while (phase := _phase(p, "scan", bob)) not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, f"bob's scan still {phase}"
        time.sleep(3)
    assert phase == "Succeeded", p.cli("logs", "scan", config=bob)[-3000:]
    assert _phase(p, "long") == "Running"  # alice's job trained on meanwhile
    output = Path(json.loads(p.cli("describe", "scan", "-o", "json", config=bob))["output_dir"])
    seen = [json.loads((output / f"trainer-{i}.json").read_text()) for i in range(3)]
    assert [s["found"] for s in seen] == [[], [], []], seen  # nothing of alice's, anywhere
    scanned = {h for s in seen for h in s["scanned"]}
    assert len(scanned) >= 2, seen  # bob's own workers' hosts: their whole port ranges, empty
    p.cli("kill", "long", "--grace", "1")
    print(
        f"bob's scan: {len(targets)} of alice's endpoints and every port of {sorted(scanned)}: none reached"
    )
