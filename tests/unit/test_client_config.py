"""The client config (``~/.paddle/config``): several datacenters, the current one, environment overrides,
TLS files handed to httpx (proved with a real mutual-TLS handshake), and the ``login`` / ``config``
commands that need no server."""

from __future__ import annotations

import json
import os
import ssl
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from paddlecloud.api.errors import InvalidInput, ServerUnreachable
from paddlecloud.client import (
    Client,
    Datacenter,
    list_datacenters,
    load_config,
    save_datacenter,
    use_datacenter,
)
from paddlecloud.client.config import config_path

pytestmark = pytest.mark.timeout(60)

EXE = Path(sys.executable).parent / "paddlecloud"

A = Datacenter(name="a", endpoint="http://a.example:8080", username="alice", token="pc_secret_a")
B = Datacenter(
    name="b",
    endpoint="https://b.example",
    username="bob",
    token="pc_secret_b",
    ca="/etc/b/ca.pem",
    cert="/etc/b/bob.pem",
    key="/etc/b/bob.key",
)


@pytest.fixture
def cfg_file() -> Path:
    return config_path()  # the autouse fixture in conftest.py points PADDLECLOUD_CONFIG at a temp file


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- the file ----------------------------------------------------------------------------------------


def test_save_and_load_several_datacenters(cfg_file: Path) -> None:
    assert load_config().current is None and list_datacenters() == []
    assert save_datacenter(A) == cfg_file
    save_datacenter(B, make_current=False)

    cfg = load_config()
    assert cfg.current == A and cfg.current_name == "a"
    assert cfg.datacenters == {"a": A, "b": B}
    assert list_datacenters() == [A, B]
    assert mode(cfg_file) == 0o600

    raw = yaml.safe_load(cfg_file.read_text())
    assert json.loads(cfg_file.read_text()) == raw  # written as JSON (YAML too): read without PyYAML
    assert raw["current"] == "a"
    assert "ca" not in raw["datacenters"]["a"]  # unset TLS fields are not written
    assert raw["datacenters"]["b"]["cert"] == "/etc/b/bob.pem"


def test_saving_again_replaces_the_entry_and_keeps_the_others(cfg_file: Path) -> None:
    save_datacenter(A)
    save_datacenter(B)
    save_datacenter(
        Datacenter(name="a", endpoint="http://a2", username="alice", token="pc_new"), make_current=False
    )
    cfg = load_config()
    assert cfg.current == B
    assert cfg.datacenters["a"].endpoint == "http://a2" and cfg.datacenters["a"].token == "pc_new"


def test_use_switches_the_current_datacenter(cfg_file: Path) -> None:
    save_datacenter(A)
    save_datacenter(B, make_current=False)
    assert use_datacenter("b") == B
    assert load_config().current == B
    assert mode(cfg_file) == 0o600
    with pytest.raises(InvalidInput, match=r"no datacenter 'c' .*known: a, b"):
        use_datacenter("c")
    assert load_config().current == B  # unchanged


def test_use_with_no_datacenters_says_how_to_add_one(cfg_file: Path) -> None:
    with pytest.raises(InvalidInput, match="paddlecloud login"):
        use_datacenter("a")
    assert not cfg_file.exists()


def test_relative_tls_paths_are_relative_to_the_config_file(cfg_file: Path) -> None:
    cfg_file.write_text(
        yaml.safe_dump(
            {
                "current": "x",
                "datacenters": {"x": {"endpoint": "https://x", "token": "t", "ca": "certs/ca.pem"}},
            }
        )
    )
    assert load_config().current == Datacenter(
        name="x", endpoint="https://x", token="t", ca=str(cfg_file.parent / "certs" / "ca.pem")
    )


def test_environment_overrides(cfg_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    save_datacenter(A)
    save_datacenter(B, make_current=False)

    monkeypatch.setenv("PADDLECLOUD_DATACENTER", "b")
    assert load_config().current == B

    monkeypatch.setenv("PADDLECLOUD_ENDPOINT", "https://b-other.example")
    current = load_config().current
    assert current is not None
    assert (current.endpoint, current.token, current.ca, current.cert) == (
        "https://b-other.example", "pc_secret_b", B.ca, B.cert,
    )  # fmt: skip

    monkeypatch.setenv("PADDLECLOUD_TOKEN", "pc_from_env")
    current = load_config().current
    assert current is not None and current.token == "pc_from_env"

    monkeypatch.delenv("PADDLECLOUD_DATACENTER")
    monkeypatch.delenv("PADDLECLOUD_ENDPOINT")
    current = load_config().current
    assert current is not None and (current.name, current.endpoint, current.token) == (
        "a",
        A.endpoint,
        "pc_from_env",
    )

    other = tmp_path / "elsewhere" / "config"
    monkeypatch.setenv("PADDLECLOUD_CONFIG", str(other))
    monkeypatch.delenv("PADDLECLOUD_TOKEN")
    assert load_config().current is None
    save_datacenter(B)
    assert other.exists() and load_config().current == B
    assert load_config(cfg_file).current == A  # the first file is untouched


# -- TLS ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A throw-away CA, a server certificate for 127.0.0.1 and a client certificate (openssl CLI)."""
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    try:
        _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                 "-subj", "/CN=PaddleCloud Test CA", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)  # fmt: skip
        for who, usage, san in (("server", "serverAuth", "IP:127.0.0.1"), ("client", "clientAuth", None)):
            _openssl("req", *ec, "-keyout", f"{who}.key", "-out", f"{who}.csr", "-subj", f"/CN={who}", cwd=d)
            ext = d / f"{who}.ext"
            ext.write_text(
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                f"extendedKeyUsage={usage}\nauthorityKeyIdentifier=keyid\n"
                + (f"subjectAltName={san}\n" if san else "")
            )
            _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-days", "2",
                     "-CAcreateserial", "-out", f"{who}.pem", "-extfile", ext.name, cwd=d)  # fmt: skip
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot make test certificates with openssl: {exc}")
    return Pki(*(str(d / f) for f in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")))


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def mtls_server(pki: Pki) -> Iterator[str]:
    """An HTTPS server that only talks to clients presenting a certificate signed by the test CA."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki.server_cert, pki.server_key)
    ctx.load_verify_locations(pki.ca)
    ctx.verify_mode = ssl.CERT_REQUIRED
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_mutual_tls_with_ca_cert_and_key(pki: Pki, mtls_server: str) -> None:
    with Client(mtls_server, "t", ca=pki.ca, cert=pki.client_cert, key=pki.client_key) as client:
        assert client.health() is True


def test_without_the_ca_the_server_is_not_trusted(pki: Pki, mtls_server: str) -> None:
    client = Client(mtls_server, "t", cert=pki.client_cert, key=pki.client_key)
    with client, pytest.raises(ServerUnreachable, match=r"TLS handshake .* failed"):
        client.health()


def test_without_a_client_certificate_the_server_refuses(pki: Pki, mtls_server: str) -> None:
    with Client(mtls_server, "t", ca=pki.ca) as client, pytest.raises(ServerUnreachable):
        client.health()


def test_the_current_datacenters_tls_files_reach_httpx(
    pki: Pki, mtls_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_datacenter(
        Datacenter(name="tls", endpoint=mtls_server, username="u", token="t",
                   ca=pki.ca, cert=pki.client_cert, key=pki.client_key)
    )  # fmt: skip
    seen: list[dict[str, Any]] = []
    real = httpx.Client

    def spy(**kwargs: Any) -> httpx.Client:
        seen.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(httpx, "Client", spy)
    with Client() as client:
        assert client.health() is True  # the handshake needs the CA and the client certificate
    verify = seen[0]["verify"]
    assert isinstance(verify, ssl.SSLContext)
    assert [dict(x[0] for x in c["subject"]) for c in verify.get_ca_certs()] == [
        {"commonName": "PaddleCloud Test CA"}
    ]

    seen.clear()
    Client(endpoint="https://other.example", token="t").close()  # another endpoint: not this one's TLS
    assert "verify" not in seen[0]


def test_no_tls_files_leaves_httpx_defaults_for_https(monkeypatch: pytest.MonkeyPatch) -> None:
    save_datacenter(Datacenter(name="c", endpoint="https://c.example", username="carol", token="t"))
    seen: list[dict[str, Any]] = []
    real = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda **kw: seen.append(kw) or real(**kw))
    Client().close()
    assert seen == [{"base_url": "https://c.example", "timeout": 30.0}]  # httpx's verifying default


def test_plain_http_loads_no_ca_bundle_and_still_refuses_unverified_tls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    save_datacenter(A)
    seen: list[dict[str, Any]] = []
    real = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda **kw: seen.append(kw) or real(**kw))
    Client().close()
    verify = seen[0]["verify"]
    assert isinstance(verify, ssl.SSLContext)
    assert verify.get_ca_certs() == []  # certifi's bundle not loaded: an http:// session has no TLS
    assert verify.verify_mode == ssl.CERT_REQUIRED and verify.check_hostname  # an https URL would fail


def test_tls_mistakes_are_one_line_errors(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="needs both cert and key"):
        Client("https://x", "t", cert=pki.client_cert)
    with pytest.raises(InvalidInput, match="cannot load the TLS files") as info:
        Client("https://x", "t", ca=str(tmp_path / "missing.pem"))
    assert "\n" not in str(info.value)
    with pytest.raises(InvalidInput, match="cannot load the TLS files"):
        Client("https://x", "t", cert=pki.client_cert, key=pki.server_key)  # key does not match


# -- the commands that need no server ----------------------------------------------------------------


def run_cli(*args: str, config: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLECLOUD_")}
    env.update(PADDLECLOUD_CONFIG=str(config), COLUMNS="200")
    return subprocess.run(
        [str(EXE), *args], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
        check=False,
    )  # fmt: skip


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.fixture
def two_datacenters(cfg_file: Path) -> Path:
    if not EXE.exists():
        pytest.skip(f"{EXE} is not installed (pip install -e .)")
    save_datacenter(A)
    save_datacenter(B, make_current=False)
    return cfg_file


def test_config_view_marks_the_current_one_and_never_prints_tokens(two_datacenters: Path) -> None:
    r = run_cli("config", "view", config=two_datacenters)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["CURRENT", "NAME", "ENDPOINT", "USER", "TLS"]
    assert lines[1].split() == ["*", "a", A.endpoint, "alice", "-"]
    assert lines[2].split() == ["b", B.endpoint, "bob", "ca+cert"]
    for fmt in ("json", "yaml", "wide", "table"):
        out = run_cli("config", "view", "-o", fmt, config=two_datacenters).stdout
        assert "pc_secret" not in out
    data = json.loads(run_cli("config", "view", "-o", "json", config=two_datacenters).stdout)
    assert data["current"] == "a"
    assert data["datacenters"]["a"]["token"] == "REDACTED"
    assert data["datacenters"]["b"] == {
        "endpoint": B.endpoint, "username": "bob", "token": "REDACTED",
        "ca": B.ca, "cert": B.cert, "key": B.key,
    }  # fmt: skip
    assert yaml.safe_load(run_cli("config", "view", "-o", "yaml", config=two_datacenters).stdout) == data


def test_config_use(two_datacenters: Path) -> None:
    r = run_cli("config", "use", "b", config=two_datacenters)
    assert r.returncode == 0, r.stderr
    assert "current datacenter: b" in r.stdout
    assert load_config(two_datacenters).current == B
    assert run_cli("config", "view", config=two_datacenters).stdout.splitlines()[2].startswith("*")

    before = two_datacenters.read_bytes()
    r = run_cli("config", "use", "nope", config=two_datacenters)
    assert r.returncode == 1
    assert "known: a, b" in one_error_line(r)
    assert two_datacenters.read_bytes() == before


def test_config_view_with_no_file(tmp_path: Path) -> None:
    if not EXE.exists():
        pytest.skip(f"{EXE} is not installed (pip install -e .)")
    r = run_cli("config", "view", config=tmp_path / "none")
    assert r.returncode == 0 and "No datacenters" in r.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--endpoint", "http://127.0.0.1:1"], "no --token given and no terminal"),
        (
            ["--endpoint", "http://127.0.0.1:1", "--token", "t", "--cert", __file__],
            "--cert and --key go together",
        ),
        (["--endpoint", "127.0.0.1:8080", "--token", "t"], "not an http(s):// URL"),
        (["--token", "t"], "--endpoint"),
    ],
)
def test_login_usage_errors_exit_2(two_datacenters: Path, args: list[str], words: str) -> None:
    before = two_datacenters.read_bytes()
    r = run_cli("login", *args, config=two_datacenters)
    assert r.returncode == 2
    assert words in one_error_line(r)
    assert two_datacenters.read_bytes() == before


def test_login_to_an_unreachable_server_exits_3_and_saves_nothing(two_datacenters: Path) -> None:
    before = two_datacenters.read_bytes()
    r = run_cli("login", "--endpoint", "http://127.0.0.1:1", "--token", "t", config=two_datacenters)
    assert r.returncode == 3
    assert "cannot reach" in one_error_line(r)
    assert two_datacenters.read_bytes() == before
