"""Client configuration: ``~/.paddle/config`` (YAML), several datacenters and a current one.

    current: local
    datacenters:
      local:
        endpoint: http://127.0.0.1:8080
        username: default
        token: pc_...

Environment variables win over the file: ``PADDLECLOUD_ENDPOINT``, ``PADDLECLOUD_TOKEN``,
``PADDLECLOUD_DATACENTER`` (which entry is current) and ``PADDLECLOUD_CONFIG`` (the file's path).
The file is written atomically and readable by its owner only (it holds tokens).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from paddlecloud.api.errors import InvalidInput

__all__ = ["ClientConfig", "Datacenter", "config_path", "load_config", "save_datacenter"]


def config_path() -> Path:
    env = os.environ.get("PADDLECLOUD_CONFIG")
    return Path(env) if env else Path.home() / ".paddle" / "config"


@dataclass(frozen=True)
class Datacenter:
    name: str
    endpoint: str
    username: str = ""
    token: str = ""


@dataclass(frozen=True)
class ClientConfig:
    current: Datacenter | None
    path: Path


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise InvalidInput(f"client config {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"client config {path} must be a mapping with 'datacenters' and 'current'")
    return data


def load_config(path: Path | None = None) -> ClientConfig:
    path = path or config_path()
    data = _read(path)
    dcs = data.get("datacenters") or {}
    name = os.environ.get("PADDLECLOUD_DATACENTER") or data.get("current") or ""
    entry = dcs.get(name) if isinstance(dcs, dict) else None
    dc = None
    if isinstance(entry, dict) and entry.get("endpoint"):
        fields = {k: str(v) for k, v in entry.items() if k in ("endpoint", "username", "token")}
        dc = Datacenter(name=name, **fields)
    endpoint = os.environ.get("PADDLECLOUD_ENDPOINT")
    token = os.environ.get("PADDLECLOUD_TOKEN")
    if endpoint or token:
        dc = Datacenter(
            name=name or "env",
            endpoint=endpoint or (dc.endpoint if dc else ""),
            username=dc.username if dc else "",
            token=token or (dc.token if dc else ""),
        )
    return ClientConfig(current=dc, path=path)


def save_datacenter(dc: Datacenter, *, make_current: bool = True, path: Path | None = None) -> Path:
    path = path or config_path()
    data = _read(path)
    dcs = data.setdefault("datacenters", {})
    dcs[dc.name] = {"endpoint": dc.endpoint, "username": dc.username, "token": dc.token}
    if make_current or not data.get("current"):
        data["current"] = dc.name
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config-")
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(data, f, sort_keys=False)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path
