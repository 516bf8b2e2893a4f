"""Client configuration: ``~/.paddle/config`` (YAML), several datacenters and a current one.

    current: local
    datacenters:
      local:
        endpoint: http://127.0.0.1:8080
        username: default
        token: pc_...
      prod:
        endpoint: https://paddlecloud.example.com
        username: alice
        token: pc_...
        ca: /etc/paddlecloud/ca.pem          # optional: CA bundle that signed the server's certificate
        cert: /home/alice/.paddle/alice.pem  # optional: client certificate (mutual TLS) ...
        key: /home/alice/.paddle/alice.key   # ... and its private key

Environment variables win over the file: ``PADDLECLOUD_ENDPOINT``, ``PADDLECLOUD_TOKEN``,
``PADDLECLOUD_DATACENTER`` (which entry is current) and ``PADDLECLOUD_CONFIG`` (the file's path).
Relative TLS paths are relative to the file's folder. The file is written atomically and readable
by its owner only (it holds tokens). The CLI writes it as JSON, which is also YAML, so that reading
it (every command) needs no YAML parser; a file written by hand in YAML's block style reads the same.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paddlecloud.api.errors import ErrorCode, InvalidInput

__all__ = [
    "ClientConfig",
    "Datacenter",
    "config_path",
    "list_datacenters",
    "load_config",
    "save_datacenter",
    "use_datacenter",
]

_TLS_FIELDS = ("ca", "cert", "key")


def config_path() -> Path:
    env = os.environ.get("PADDLECLOUD_CONFIG")
    return Path(env) if env else Path.home() / ".paddle" / "config"


@dataclass(frozen=True)
class Datacenter:
    name: str
    endpoint: str
    username: str = ""
    token: str = ""
    #: TLS: CA bundle (file or directory) to verify the server with; default: the system's.
    ca: str | None = None
    #: TLS client certificate and its key (both or neither).
    cert: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class ClientConfig:
    #: the datacenter requests go to, environment overrides applied; ``None``: nothing configured
    current: Datacenter | None
    path: Path
    #: every datacenter in the file, by name (no environment overrides)
    datacenters: dict[str, Datacenter] = field(default_factory=dict)
    #: the current datacenter's name (``PADDLECLOUD_DATACENTER`` or the file's ``current``)
    current_name: str = ""


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    text = path.read_text()
    try:  # the file as the CLI writes it: JSON (a YAML document too), read without PyYAML's import
        data = json.loads(text) if text.lstrip().startswith("{") else None
    except ValueError:
        data = None
    if data is None:  # written or edited by hand as YAML
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise InvalidInput(f"client config {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"client config {path} must be a mapping with 'datacenters' and 'current'")
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)  # JSON is YAML: the file stays a YAML document
            f.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _datacenters(data: dict[str, Any], base: Path) -> dict[str, Datacenter]:
    dcs = data.get("datacenters") or {}
    out: dict[str, Datacenter] = {}
    if not isinstance(dcs, dict):
        return out
    for name, entry in dcs.items():
        if not isinstance(entry, dict) or not entry.get("endpoint"):
            continue
        fields: dict[str, Any] = {k: str(entry[k]) for k in ("endpoint", "username", "token") if entry.get(k)}
        for k in _TLS_FIELDS:
            if entry.get(k):
                fields[k] = str(base / Path(str(entry[k])).expanduser())  # absolute paths stay as they are
        out[str(name)] = Datacenter(name=str(name), **fields)
    return out


def load_config(path: Path | None = None) -> ClientConfig:
    path = path or config_path()
    data = _read(path)
    dcs = _datacenters(data, path.parent)
    name = os.environ.get("PADDLECLOUD_DATACENTER") or str(data.get("current") or "")
    dc = dcs.get(name)
    endpoint = os.environ.get("PADDLECLOUD_ENDPOINT")
    token = os.environ.get("PADDLECLOUD_TOKEN")
    if endpoint or token:
        dc = Datacenter(
            name=name or "env",
            endpoint=endpoint or (dc.endpoint if dc else ""),
            username=dc.username if dc else "",
            token=token or (dc.token if dc else ""),
            ca=dc.ca if dc else None,
            cert=dc.cert if dc else None,
            key=dc.key if dc else None,
        )
    return ClientConfig(current=dc, path=path, datacenters=dcs, current_name=name)


def list_datacenters(path: Path | None = None) -> list[Datacenter]:
    """Every datacenter in the config file, in file order."""
    return list(load_config(path).datacenters.values())


def save_datacenter(dc: Datacenter, *, make_current: bool = True, path: Path | None = None) -> Path:
    """Add or replace ``dc`` in the config file (and make it current unless told not to)."""
    path = path or config_path()
    data = _read(path)
    dcs = data.get("datacenters")
    if not isinstance(dcs, dict):
        dcs = data["datacenters"] = {}
    entry: dict[str, str] = {"endpoint": dc.endpoint, "username": dc.username, "token": dc.token}
    for k in _TLS_FIELDS:
        value = getattr(dc, k)
        if value:
            entry[k] = value
    dcs[dc.name] = entry
    if make_current or not data.get("current"):
        data["current"] = dc.name
    _write(path, data)
    return path


def use_datacenter(name: str, *, path: Path | None = None) -> Datacenter:
    """Make ``name`` the current datacenter in the config file; unknown names are an error."""
    path = path or config_path()
    data = _read(path)
    dcs = _datacenters(data, path.parent)
    if name not in dcs:
        known = ", ".join(dcs) or "none; add one with `paddlecloud login`"
        raise InvalidInput(
            f"no datacenter {name!r} in {path} (known: {known})", code=ErrorCode.INVALID_REQUEST
        )
    data["current"] = name
    _write(path, data)
    return dcs[name]
