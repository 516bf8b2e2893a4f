"""``paddlecloud pfs`` against the real server: a non-admin user copies files and trees both ways,
lists, stats, moves, removes, checks usage; errors are one ``error:`` line with exit 1; an upload
killed half-way resumes, and a partial file is never listed."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from .conftest import PADDLECLOUD, ROOT, Server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

USER = "pfs-alice"
HOME = f"/pfs/local/home/{USER}"
MiB = 1 << 20


class User:
    """The CLI as one (non-admin) user, with its own client config."""

    def __init__(self, server: Server, config: Path, token: str) -> None:
        self.server = server
        self.config = config
        self.token = token
        self.endpoint = f"http://127.0.0.1:{server.port}"

    @property
    def env(self) -> dict[str, str]:
        return {**self.server.env, "PADDLECLOUD_CONFIG": str(self.config)}

    def cli(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [PADDLECLOUD, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )
        if check and r.returncode != 0:
            raise AssertionError(f"paddlecloud {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    def json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "-o", "json").stdout)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [PADDLECLOUD, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )

    def http(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.endpoint, headers={"Authorization": f"Bearer {self.token}"}, timeout=10
        )


@pytest.fixture(scope="module")
def alice(server: Server, tmp_path_factory: pytest.TempPathFactory) -> User:
    issued = json.loads(server.cli("admin", "create-user", USER, "-o", "json").stdout)
    user = User(server, tmp_path_factory.mktemp("pfs-cli") / "config", issued["token"])
    user.cli("login", "--endpoint", user.endpoint, "--token", issued["token"], "--user", USER)
    assert user.json("pfs", "du")["user"] == USER
    return user


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def tree_of(root: Path) -> dict[str, str | None]:
    return {
        p.relative_to(root).as_posix(): (sha256(p) if p.is_file() else None) for p in sorted(root.rglob("*"))
    }


def names(items: list[dict[str, Any]], base: str) -> list[str]:
    return [i["path"].removeprefix(base + "/") for i in items]


# -- copies --------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1000, 20 * MiB + 7], ids=["empty", "small", "two-chunks"])
def test_cp_file_up_and_down(alice: User, tmp_path: Path, size: int) -> None:
    src = write(tmp_path / "src.bin", os.urandom(size))
    alice.cli("pfs", "mkdir", "-p", f"pfs:files-{size}")
    r = alice.cli("pfs", "cp", str(src), f"pfs:files-{size}")  # into the directory
    assert "copied 1 file(s)" in r.stderr and "Traceback" not in r.stderr
    info = alice.json("pfs", "stat", f"pfs:files-{size}/src.bin")
    assert (info["path"], info["type"], info["size"]) == (f"{HOME}/files-{size}/src.bin", "file", size)
    out = tmp_path / "out.bin"
    alice.cli("pfs", "cp", "-q", f"{HOME}/files-{size}/src.bin", str(out))  # the long form of the path
    assert sha256(out) == sha256(src)
    assert [p.name for p in tmp_path.iterdir() if "pfspart" in p.name] == []


def test_cp_r_tree_up_and_down(alice: User, tmp_path: Path) -> None:
    tree = tmp_path / "dataset"
    for rel, size in {
        "train/a.csv": 100,
        "train/b.csv": 2000,
        "test/deep/c.csv": 10,
        "README": 5,
        "empty": 0,
        "train/big.bin": 17 * MiB,
    }.items():
        write(tree / rel, os.urandom(size))
    (tree / "nothing-here").mkdir()
    alice.cli("pfs", "mkdir", "-p", "pfs:trees")
    r = alice.cli("pfs", "cp", "-r", str(tree), "pfs:trees")
    assert "copied 6 file(s)" in r.stderr
    listed = alice.json("pfs", "ls", "-r", "pfs:trees/dataset")["items"]
    assert names(listed, f"{HOME}/trees/dataset") == [
        "README",
        "empty",
        "nothing-here",
        "test",
        "test/deep",
        "test/deep/c.csv",
        "train",
        "train/a.csv",
        "train/b.csv",
        "train/big.bin",
    ]
    out = tmp_path / "back"
    alice.cli("pfs", "cp", "-r", "-q", "pfs:trees/dataset", str(out))
    assert tree_of(out) == tree_of(tree)


def test_cp_follows_cp_rules_and_makes_missing_parents(alice: User, tmp_path: Path) -> None:
    """``cp -r SRC DST/`` and ``cp -r SRC EXISTING_DIR`` copy to DST/SRC; ``cp -r SRC NEW`` makes
    NEW the copy; missing parents are created on both sides (the README's path: pfs:data did not
    exist, and the job's --input pfs:data/dataset must be the data set)."""
    tree = tmp_path / "dataset"
    write(tree / "a.txt", b"a")
    write(tree / "sub" / "b.txt", b"bb")
    alice.cli("pfs", "cp", "-r", str(tree), "pfs:rules/data/")  # neither rules nor rules/data exist
    assert names(alice.json("pfs", "ls", "-r", "pfs:rules/data")["items"], f"{HOME}/rules/data") == [
        "dataset", "dataset/a.txt", "dataset/sub", "dataset/sub/b.txt",
    ]  # fmt: skip
    write(tree / "sub" / "b.txt", b"bbb")
    alice.cli("pfs", "cp", "-r", "-f", str(tree), "pfs:rules/data")  # an existing directory: the same place
    assert alice.json("pfs", "stat", "pfs:rules/data/dataset/sub/b.txt")["size"] == 3
    alice.cli("pfs", "cp", "-r", str(tree), "pfs:rules/copy/v1")  # a new name: the copy itself
    assert alice.json("pfs", "stat", "pfs:rules/copy/v1/a.txt")["size"] == 1
    alice.cli("pfs", "cp", str(tree / "a.txt"), "pfs:rules/one/two/")  # a file into a new directory
    assert alice.json("pfs", "stat", "pfs:rules/one/two/a.txt")["size"] == 1
    alice.cli("pfs", "cp", str(tree / "a.txt"), "pfs:rules/three/renamed.txt")
    assert alice.json("pfs", "stat", "pfs:rules/three/renamed.txt")["size"] == 1
    # and back: the same rules locally
    alice.cli("pfs", "cp", "-r", "-q", "pfs:rules/data/dataset", str(tmp_path / "down" / "here") + "/")
    assert tree_of(tmp_path / "down" / "here" / "dataset") == tree_of(tree)
    alice.cli("pfs", "cp", "-r", "-q", "pfs:rules/data/dataset", str(tmp_path / "new" / "copy"))
    assert tree_of(tmp_path / "new" / "copy") == tree_of(tree)
    alice.cli("pfs", "cp", "-q", "pfs:rules/data/dataset/a.txt", str(tmp_path / "down"))  # existing dir
    assert (tmp_path / "down" / "a.txt").read_bytes() == b"a"


def test_mkdir_makes_missing_parents(alice: User) -> None:
    alice.cli("pfs", "mkdir", "pfs:nested/a/b", "pfs:nested/c")
    assert names(alice.json("pfs", "ls", "-r", "pfs:nested")["items"], f"{HOME}/nested") == ["a", "a/b", "c"]
    line = one_error_line(alice.cli("pfs", "mkdir", "pfs:nested/a/b", check=False))
    assert "exists" in line
    alice.cli("pfs", "mkdir", "-p", "pfs:nested/a/b", "pfs:nested/a/d")  # -p: existing ones are fine
    assert alice.json("pfs", "stat", "pfs:nested/a/d")["type"] == "dir"


# -- namespace -----------------------------------------------------------------------------------


def test_ls_stat_mv_rm_du(alice: User, tmp_path: Path) -> None:
    alice.cli("pfs", "mkdir", "-p", "pfs:ns/a/b")
    for rel, data in {"ns/one.csv": b"1,2\n", "ns/two.csv": b"3\n", "ns/a/b/three.txt": b"333"}.items():
        alice.cli("pfs", "cp", "-q", str(write(tmp_path / rel, data)), f"pfs:{rel}")

    home = alice.cli("pfs", "ls").stdout  # no path: the home
    header = home.splitlines()[0].split()
    assert header == ["TYPE", "SIZE", "MODIFIED", "PATH"]
    assert f"{HOME}/ns/" in home
    assert f"{HOME}/ns/one.csv" not in home  # not recursive
    rec = alice.cli("pfs", "ls", "-r", "pfs:ns").stdout
    assert f"{HOME}/ns/a/b/three.txt" in rec and f"{HOME}/ns/a/b/" in rec
    globbed = alice.json("pfs", "ls", "pfs:ns/*.csv")["items"]
    assert names(globbed, f"{HOME}/ns") == ["one.csv", "two.csv"]

    st = alice.cli("pfs", "stat", "pfs:ns/one.csv").stdout
    assert f"{HOME}/ns/one.csv" in st and "type: file" in st and "size: 4 " in st

    alice.cli("pfs", "mv", "pfs:ns/one.csv", "pfs:ns/a")
    assert names(alice.json("pfs", "ls", "pfs:ns/a")["items"], f"{HOME}/ns/a") == ["b", "one.csv"]
    alice.cli("pfs", "mv", "pfs:ns/a", "pfs:ns/renamed")
    assert alice.json("pfs", "stat", "pfs:ns/renamed/b/three.txt")["size"] == 3

    line = one_error_line(alice.cli("pfs", "rm", "pfs:ns/renamed", check=False))
    assert "is a directory (use -r)" in line
    assert alice.json("pfs", "stat", "pfs:ns/renamed")["type"] == "dir"
    before = alice.json("pfs", "du")
    alice.cli("pfs", "rm", "-r", "pfs:ns/renamed")
    line = one_error_line(alice.cli("pfs", "stat", "pfs:ns/renamed", check=False))
    assert "no such file or directory" in line
    after = alice.json("pfs", "du")
    # the files' bytes (the user's jobs' folders count in "used" too, measured apart: "jobs")
    assert before["pfs"] - after["pfs"] == 4 + 3
    assert after["limit"] is not None and after["reserved"] == 0
    du = alice.cli("pfs", "du").stdout
    assert du.startswith(f"{USER}: ") and "used" in du and "limit" in du


# -- errors: one line, exit 1 --------------------------------------------------------------------


def test_error_lines(alice: User, tmp_path: Path) -> None:
    d = tmp_path / "adir"
    write(d / "f", b"x")
    f = write(tmp_path / "file.txt", b"mine")
    cases = [
        (["pfs", "cp", str(d), "pfs:adir"], "is a directory (use -r)"),
        (["pfs", "cp", str(f), "/pfs/local/home/default/stolen.txt"], "not yours"),
        (["pfs", "cp", str(f), "/pfs/local/public/x.txt"], "written by admins only"),
        (["pfs", "cp", "pfs:does/not/exist", str(tmp_path / "out")], "no such file or directory"),
        (["pfs", "cp", "/pfs/local/home/default/anything", str(tmp_path / "out")], "not yours"),
        (["pfs", "ls", "pfs:nope"], "no such file or directory"),
        (["pfs", "ls", "/pfs/local/home/default"], "not yours"),
        (["pfs", "stat", "pfs:../default/x"], "'..'"),
        (["pfs", "mkdir", "pfs:trees"], "exists"),  # made by test_cp_r_tree_up_and_down; -p allows it
        (["pfs", "rm", "pfs:nope"], "no such file or directory"),
        (["pfs", "mv", "pfs:nope", "pfs:x"], "no such file or directory"),
    ]
    for args, words in cases:
        line = one_error_line(alice.cli(*args, check=False))
        assert words in line, (args, line)
    assert not (tmp_path / "out").exists()
    # a copy that cannot start says why before drawing anything (no empty "0/0 bytes" bar)
    for args in (["pfs", "cp", "-r", str(tmp_path / "missing"), "pfs:data/"],
                 ["pfs", "cp", str(d), str(f), "pfs:not-a-dir"],
                 ["pfs", "cp", "pfs:nope", str(tmp_path / "out")]):  # fmt: skip
        r = alice.cli(*args, check=False)
        one_error_line(r)
        assert r.stdout == "", (args, r.stdout)
    # cp needs a source and a destination: usage error, exit 2
    r = alice.cli("pfs", "cp", str(f), check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr


# -- an interrupted upload resumes; a partial file is never listed -------------------------------


def staged_marks(server: Server, user: str, name: str) -> int:
    """Chunks the server holds for ``user``'s upload of a file called ``name`` (0: none yet)."""
    n = 0
    for d in (server.data_dir / "pfs" / "uploads").glob("*"):
        try:
            meta = json.loads((d / "meta.json").read_text())
            if meta["owner"] == user and meta["key"][-1] == name:
                n = max(n, len(list((d / "marks").iterdir())))
        except (OSError, ValueError, KeyError):
            continue
    return n


def abandon(user: User, path: str, size: int, chunk: int) -> None:
    """Drop what an attempt left: its staged upload, or the file if it completed."""
    with user.http() as http:
        r = http.post("/api/v1/pfs/uploads", json={"path": path, "size": size, "chunk_size": chunk})
        if r.status_code == 201:
            assert http.delete(f"/api/v1/pfs/uploads/{r.json()['id']}").status_code == 204
    user.cli("pfs", "rm", path, check=False)


class Watcher:
    """Lists a directory over and over (HTTP every few ms, and ``pfs ls`` as fast as it starts) and
    records every entry seen as (how, name, size, when the listing started, when it answered)."""

    def __init__(self, user: User, remote_dir: str) -> None:
        self.user, self.dir = user, remote_dir
        self.http_polls = self.cli_polls = 0
        self.seen: list[tuple[str, str, int, float, float]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._http, daemon=True),
            threading.Thread(target=self._cli, daemon=True),
        ]

    def __enter__(self) -> Watcher:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _record(self, how: str, items: list[dict[str, Any]], started: float) -> None:
        ended = time.monotonic()
        for i in items:
            self.seen.append((how, i["path"].rsplit("/", 1)[-1], int(i["size"]), started, ended))

    def _http(self) -> None:
        with self.user.http() as http:
            while not self._stop.is_set():
                started = time.monotonic()
                r = http.get("/api/v1/pfs/list", params={"path": self.dir})
                if r.status_code != 200:
                    self.errors.append(r.text)
                else:
                    self._record("http", r.json()["items"], started)
                    self.http_polls += 1
                time.sleep(0.002)

    def _cli(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            r = self.user.cli("pfs", "ls", "-o", "json", self.dir, check=False, timeout=60)
            if r.returncode != 0:
                self.errors.append(r.stderr)
            else:
                self._record("cli", json.loads(r.stdout)["items"], started)
                self.cli_polls += 1


def test_interrupted_upload_resumes_and_is_never_listed_partially(
    alice: User, server: Server, tmp_path: Path
) -> None:
    size, chunk = 64 * MiB, 16 * MiB  # the CLI's chunk size: 4 chunks
    src = write(tmp_path / "big.bin", os.urandom(size))
    remote_dir = f"{HOME}/resume"
    alice.cli("pfs", "mkdir", "-p", remote_dir)

    with Watcher(alice, remote_dir) as watch:
        # 1) the copy, one chunk in flight, SIGKILLed as soon as the server holds a verified chunk
        name, held = "", 0
        for attempt in range(3):  # a copy that outruns the kill is retried under a new name
            name = f"big{attempt}.bin"
            proc = alice.popen("pfs", "cp", "-q", "-j", "1", str(src), f"{remote_dir}/{name}")
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline:
                if staged_marks(server, USER, name) >= 1:
                    proc.send_signal(signal.SIGKILL)
                    break
                time.sleep(0.001)
            proc.wait(timeout=30)
            time.sleep(0.5)  # a chunk the server was still receiving is dropped or marked by now
            held = staged_marks(server, USER, name)
            if proc.returncode == -signal.SIGKILL and 1 <= held < size // chunk:
                break
            abandon(alice, f"{remote_dir}/{name}", size, chunk)
        else:
            pytest.fail("could not interrupt the upload half-way in 3 attempts")
        print(f"interrupted attempt {attempt}: the server held {held} of {size // chunk} chunks")

        # 2) between the runs: not listed, but reserved against the quota
        listed = {i["path"].rsplit("/", 1)[-1] for i in alice.json("pfs", "ls", remote_dir)["items"]}
        assert name not in listed
        assert alice.json("pfs", "du")["reserved"] >= size

        # 3) the same copy again: only the missing chunks are sent
        resumed_at = time.monotonic()
        r = alice.cli("pfs", "cp", "-j", "1", str(src), f"{remote_dir}/{name}")
        assert (
            f"sent {(size - held * chunk) // MiB}.0 MiB, {held * chunk // MiB}.0 MiB already there"
            in r.stderr
        ), (held, r.stderr)
        deadline = time.monotonic() + 30  # until a `pfs ls` that started afterwards has seen it
        while not any(s[0] == "cli" and s[1] == name and s[3] > resumed_at for s in watch.seen):
            assert time.monotonic() < deadline, "pfs ls never listed the finished file"
            time.sleep(0.05)
    assert not watch.errors, watch.errors[:3]
    assert watch.http_polls > 50 and watch.cli_polls >= 2, (watch.http_polls, watch.cli_polls)

    sightings = [s for s in watch.seen if s[1] == name]
    # never listed by a listing that answered before the resumed copy started (a `pfs ls` that
    # started before it may answer after it ended); when listed, always whole
    assert [s for s in sightings if s[4] < resumed_at] == []
    assert sightings, "the watcher never saw the finished file"
    assert {s[2] for s in sightings} == {size}
    assert {s[0] for s in sightings} == {"http", "cli"}
    # no other (partial or temporary) entry ever appeared in the directory
    assert {s[1] for s in watch.seen} <= {f"big{i}.bin" for i in range(3)}

    out = tmp_path / "back.bin"
    alice.cli("pfs", "cp", "-q", f"{remote_dir}/{name}", str(out))
    assert sha256(out) == sha256(src)
    assert alice.json("pfs", "du")["reserved"] == 0


def _data_port_bytes(server: Server) -> dict[str, float]:
    """``paddlecloud_pfs_data_port_bytes_total`` by direction, read as the admin."""
    config = yaml.safe_load((server.home / "config").read_text())
    token = config["datacenters"][config["current"]]["token"]
    text = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10).text
    out = {"received": 0.0, "sent": 0.0}
    for line in text.splitlines():
        if line.startswith("paddlecloud_pfs_data_port_bytes_total{"):
            direction = line.split('direction="', 1)[1].split('"', 1)[0]
            out[direction] = float(line.rsplit(" ", 1)[1])
    return out


def test_a_client_without_the_same_host_path_moves_chunks_on_the_data_port(
    alice: User, server: Server, tmp_path: Path
) -> None:
    """What a client on another host does (the same-host fast path off): a file of three chunks goes
    up and down on the server's data port (``up`` prints it), checked, and none of it through the API;
    with the data port off too, the same through the API."""
    log = server.log_path.read_text()
    assert "PFS data port: " in log, log[-2000:]
    data = os.urandom(40 * MiB)
    src = write(tmp_path / "far.bin", data)
    far = {**alice.env, "PADDLECLOUD_PFS_LOCAL": "0"}

    def cp(env: dict[str, str], *args: str) -> None:
        r = subprocess.run([PADDLECLOUD, "pfs", "cp", "-q", *args], capture_output=True, text=True, env=env,
                           timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
        assert r.returncode == 0, r.stderr

    before = _data_port_bytes(server)
    cp(far, str(src), "pfs:far.bin")
    cp(far, "pfs:far.bin", str(tmp_path / "back.bin"))
    after = _data_port_bytes(server)
    assert (tmp_path / "back.bin").read_bytes() == data
    assert after["received"] - before["received"] == len(data)
    assert after["sent"] - before["sent"] == len(data)

    api_only = {**far, "PADDLECLOUD_PFS_DATA": "0"}
    cp(api_only, "pfs:far.bin", str(tmp_path / "api.bin"))
    assert (tmp_path / "api.bin").read_bytes() == data
    assert _data_port_bytes(server) == after
