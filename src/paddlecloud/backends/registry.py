"""The backends this platform knows, by name: how to make each one's settings and the backend itself.

    paddlecloud up --backend NAME [its options]
        └─ entry(NAME) ─ settings(options) ─▶ the backend's own settings object (a frozen dataclass)
    Platform.open(config) ─ entry(config.backend).create(BackendSetup(settings, data dir, ...))
        └─ imports the backend's module only now (``factory``: "module:callable"), so an optional
           backend's dependencies are needed only where it is chosen

An entry names the ``up`` options it reads (Click parameter names: ``node_cpu`` for ``--node-cpu``);
the CLI refuses an option of another backend, and the entry's ``settings`` turns the values into the
settings object (``backends.options.OptionError`` for a bad value, naming the option). Adding a backend is one
package plus one :class:`BackendEntry` in ``_builtin()`` (and its options on ``up``); nothing in the
controller names a backend.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from paddlecloud.backends.base import Backend, BackendSetup
from paddlecloud.backends.options import OptionError

__all__ = [
    "BackendConfigError",
    "BackendEntry",
    "BackendSetup",
    "OptionError",
    "UnknownBackend",
    "backend_names",
    "entry",
    "register",
]


class BackendConfigError(ValueError):
    """The configured backend cannot be used as configured; the message says what to change."""


class UnknownBackend(BackendConfigError):
    """No backend of that name (the message lists the known ones), or its module cannot be loaded."""


@dataclass(frozen=True)
class BackendEntry:
    name: str
    #: one line for ``up --help`` and errors
    description: str
    #: the settings dataclass: ``settings_type()`` are the defaults, ``settings_type.from_options``
    #: makes them from ``up``'s option values (raising :class:`OptionError`)
    settings_type: type[Any]
    #: "module:callable" taking a :class:`BackendSetup` and returning the backend (imported lazily)
    factory: str
    #: the ``up`` options (Click parameter names) this backend reads
    options: tuple[str, ...] = ()
    #: the pip extra its module needs, named when the import fails ("": none)
    extra: str = ""
    #: its workers run on other hosts than the server's: the API URL they get must not be loopback
    #: (``server.addresses``: ``up --host 0.0.0.0`` then gives them this host's name)
    remote_workers: bool = False

    def settings(self, options: Mapping[str, Any]) -> Any:
        """The settings from ``up``'s option values (only this entry's ``options`` are read)."""
        return self.settings_type.from_options({k: v for k, v in options.items() if k in self.options})

    def create(self, setup: BackendSetup) -> Backend:
        module, _, attr = self.factory.partition(":")
        try:
            make = getattr(importlib.import_module(module), attr)
        except ImportError as exc:
            extra = f": pip install 'paddlecloud[{self.extra}]'" if self.extra else ""
            raise UnknownBackend(f"the {self.name} backend cannot be loaded{extra} ({exc})") from None
        if setup.settings is None:
            setup = replace(setup, settings=self.settings_type())
        elif not isinstance(setup.settings, self.settings_type):
            raise BackendConfigError(
                f"the {self.name} backend takes {self.settings_type.__name__}, "
                f"not {type(setup.settings).__name__}"
            )
        backend: Backend = make(setup)
        return backend


def _builtin() -> dict[str, BackendEntry]:
    from paddlecloud.backends.kubernetes.settings import KubeSettings
    from paddlecloud.backends.local.settings import LocalSettings
    from paddlecloud.backends.slurm.settings import SlurmSettings

    return {
        e.name: e
        for e in (
            BackendEntry(
                name="local",
                description="processes on virtual nodes of this machine",
                settings_type=LocalSettings,
                factory="paddlecloud.backends.local.backend:create",
                options=LocalSettings.OPTIONS,
            ),
            BackendEntry(
                name="kubernetes",
                description="a TrainingJob per job, made into Pods by the operator; docs/kubernetes.md",
                settings_type=KubeSettings,
                factory="paddlecloud.backends.kubernetes.backend:create",
                options=KubeSettings.OPTIONS,
                extra="kubernetes",
                remote_workers=True,
            ),
            BackendEntry(
                name="slurm",
                description="a Slurm batch job per worker on a Slurm cluster; docs/slurm.md",
                settings_type=SlurmSettings,
                factory="paddlecloud.backends.slurm.backend:create",
                options=SlurmSettings.OPTIONS,
                remote_workers=True,
            ),
        )
    }


_ENTRIES: dict[str, BackendEntry] = {}


def _entries() -> dict[str, BackendEntry]:
    if not _ENTRIES:  # built on first use: the backends' settings modules import this package
        _ENTRIES.update(_builtin())
    return _ENTRIES


def register(new: BackendEntry) -> None:
    """Add (or replace) a backend entry: for backends outside this package, and tests."""
    _entries()[new.name] = new


def backend_names() -> tuple[str, ...]:
    return tuple(_entries())


def entry(name: str) -> BackendEntry:
    """The entry of backend ``name``; :class:`UnknownBackend` listing the known ones otherwise."""
    try:
        return _entries()[name]
    except KeyError:
        known = ", ".join(f"{e.name} ({e.description})" for e in _entries().values())
        raise UnknownBackend(f"unknown backend {name!r}: choose one of {known}") from None
