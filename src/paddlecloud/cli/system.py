"""Platform commands: ``up`` (run the platform, in the foreground or detached), ``down`` (stop a
detached one), ``operator`` (the Kubernetes backend's TrainingJob operator) and ``version``."""

from __future__ import annotations

import os
import ssl
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from paddlecloud._version import API_VERSION, __version__
from paddlecloud.cli import daemon
from paddlecloud.cli.output import FORMATS, emit
from paddlecloud.client import Client, Datacenter, load_config, save_datacenter
from paddlecloud.core.names import check_dns1123_label
from paddlecloud.core.quantity import QuantityError, parse_cpu, parse_memory

if TYPE_CHECKING:  # the server's modules are imported by `up` only (the CLI starts fast)
    from paddlecloud.server.main import MetricsAccess

__all__ = ["down", "operator", "up", "version"]


def _quantity(parse: object, value: str | None, flag: str) -> int | None:
    if value is None:
        return None
    try:
        return parse(value)  # type: ignore[operator,no-any-return]
    except QuantityError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None


def _limits(text: str) -> dict[str, int]:
    """``cpu=8,memory=32Gi,gpu=2`` (any subset) as ComputeLimits fields."""
    parsers = {"cpu": ("cpu_m", parse_cpu), "memory": ("memory", parse_memory), "gpu": ("gpu", None)}
    out: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in parsers:
            raise click.BadParameter(
                f"{item!r}: expected cpu=N, memory=Q or gpu=N", param_hint="--default-quota"
            )
        field, parse = parsers[key]
        if parse is None:
            if not value.isdigit():
                raise click.BadParameter(f"gpu={value!r} is not a whole number", param_hint="--default-quota")
            out[field] = int(value)
        else:
            out[field] = _quantity(parse, value, "--default-quota") or 0
    return out


#: a PEM file given to ``up`` (certificate, key, CA bundle)
_PEM = click.Path(exists=True, dir_okay=False, resolve_path=True, path_type=Path)


def _tls(cert: Path | None, key: Path | None, ca: Path | None) -> tuple[str, str, str] | None:
    """``--tls-cert/--tls-key/--tls-ca`` as (certificate, key, CA bundle) absolute paths, checked
    by loading them; None without TLS. The CA defaults to the certificate (a self-signed one)."""
    if cert is None and key is None:
        if ca is not None:
            raise click.UsageError("--tls-ca needs --tls-cert and --tls-key")
        return None
    if cert is None or key is None:
        raise click.UsageError("--tls-cert and --tls-key go together")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise click.BadParameter(f"cannot use {cert} with {key}: {exc}", param_hint="--tls-cert") from None
    trust = ca or cert
    try:
        ssl.create_default_context(cafile=str(trust))
    except (OSError, ssl.SSLError) as exc:
        raise click.BadParameter(f"{trust} is no CA bundle: {exc}", param_hint="--tls-ca") from None
    return str(cert), str(key), str(trust)


def _request_size(text: str) -> int:
    """``--max-request-size``: 64Ki..1Gi (a job spec needs a few KiB; a body is held while parsed)."""
    size = _quantity(parse_memory, text, "--max-request-size") or 0
    if not 64 * 1024 <= size <= 2**30:
        raise click.BadParameter(f"{text!r} is outside 64Ki..1Gi", param_hint="--max-request-size")
    return size


def _metrics_access(public: bool, token_file: Path | None) -> MetricsAccess:
    """``--metrics-public`` / ``--metrics-token-file`` as the platform's ``MetricsAccess``."""
    from paddlecloud.server.main import MetricsAccess

    if token_file is None:
        return MetricsAccess(public=public)
    if public:
        raise click.UsageError("--metrics-public and --metrics-token-file exclude each other: give one")
    try:
        token = token_file.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(
            f"cannot read {token_file}: {exc}", param_hint="--metrics-token-file"
        ) from None
    if len(token) < 16 or any(c.isspace() for c in token):
        raise click.BadParameter(
            f"{token_file} must hold one token of at least 16 characters without spaces "
            "(e.g. the output of: openssl rand -hex 32)",
            param_hint="--metrics-token-file",
        )
    return MetricsAccess.with_token(token)


def _datacenter(name: str) -> str:
    try:
        return check_dns1123_label(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--datacenter") from None


#: ``--data-dir`` of ``up`` and ``down``
data_dir_option = click.option(
    "--data-dir", type=click.Path(path_type=Path), default=Path.home() / ".paddlecloud", show_default=True
)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8080, show_default=True)
@data_dir_option
@click.option(
    "--database", help="SQLAlchemy URL (default: SQLite in the data dir), e.g. postgresql+psycopg://..."
)
@click.option("--nodes", type=click.IntRange(1, 64), default=1, show_default=True, help="virtual nodes")
@click.option("--node-cpu", help="cpu per node (default: this machine's cores)")
@click.option("--node-memory", help="memory per node (default: this machine's memory)")
@click.option("--node-gpu", type=click.IntRange(0, 64), help="GPUs per node (default: from nvidia-smi)")
@click.option(
    "--policy",
    type=click.Choice(["elastic", "goodput", "tiresias", "edl", "fifo", "fifo-backfill"]),
    help="scheduling policy (docs/architecture.md); default: the server's, elastic",
)
@click.option("--max-package-size", default="100Mi", show_default=True, help="largest job package accepted")
@click.option(
    "--max-request-size",
    default="1Mi",
    show_default=True,
    help="largest request body other than a PFS upload (a job spec); larger: 413 request_too_large",
)
@click.option(
    "--datacenter", default="local", show_default=True, help="name in PFS paths: /pfs/<datacenter>/..."
)
@click.option(
    "--storage-quota",
    default="100Gi",
    show_default=True,
    help="default PFS quota per user ('none': no limit)",
)
@click.option(
    "--default-quota",
    default="",
    metavar="cpu=N,memory=Q,gpu=N",
    help="compute limits each new non-admin user starts with (default: none)",
)
@click.option(
    "--backend",
    default="local",
    show_default=True,
    help="what runs the jobs: local (processes on this machine), kubernetes (Pods; docs/kubernetes.md), "
    "slurm (Slurm batch jobs; docs/slurm.md); an unknown name lists the known ones",
)
@click.option("--slurm-partition", help="slurm: the partition jobs run in (default: the cluster's default)")
@click.option(
    "--slurm-account",
    help="slurm: the account jobs are charged to; {user} in it is the platform user (pc-{user}: one account "
    "per user, so Slurm's fair share sees them; default: the server's Unix user's default account)",
)
@click.option("--slurm-qos", help="slurm: the QOS of the jobs")
@click.option(
    "--slurm-sbatch-arg",
    multiple=True,
    metavar="ARG",
    help="slurm: one more sbatch argument for every worker, e.g. --constraint=ib (repeatable)",
)
@click.option(
    "--slurm-node-cache",
    metavar="DIR",
    help="slurm: node-local folder (absolute, the same path on every node, kept between jobs) for "
    "SampleSet caches and mounts (default: /var/cache/paddlecloud; docs/slurm.md)",
)
@click.option(
    "--slurm-ports",
    metavar="LO-HI",
    help="slurm: the ports workers and rendezvous stores listen on, each unique across the server's "
    "live workers; every node must keep them free (default: 21000-28999; docs/slurm.md)",
)
@click.option(
    "--slurm-fence-after",
    metavar="SECONDS|off",
    help="slurm: a sandboxed worker on a node that hears neither the server nor the Slurm controller "
    "this long ends itself, so that its restart elsewhere never runs beside it (default: half of "
    "SlurmdTimeout; docs/slurm.md)",
)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="kubernetes: kubeconfig file (default: the pod's service account)",
)
@click.option("--image", help="kubernetes: the jobs' container image (default: python:3.11-slim)")
@click.option("--kube-image", help="kubernetes: image of the package fetch / wait init containers")
@click.option("--kube-namespace", help="kubernetes: one namespace for all jobs (default: paddlecloud-<user>)")
@click.option(
    "--kube-storage-claim", help="kubernetes: the PersistentVolumeClaim holding PFS, mounted in pods"
)
@click.option(
    "--kube-egress",
    multiple=True,
    metavar="CIDR[:PORT[/PROTOCOL]]",
    help="kubernetes: one more destination job pods may reach, e.g. a pip index: 10.0.0.9/32:443 "
    "(repeatable; default: only their own job, the API and DNS; docs/kubernetes.md)",
)
@click.option(
    "--api-url",
    help="this server's URL as workers reach it (default: http://HOST:PORT; for --host 0.0.0.0 "
    "this host's name where the backend's workers run on other hosts: slurm, kubernetes)",
)
@click.option(
    "--isolation",
    type=click.Choice(["auto", "sandbox", "none"]),
    default="auto",
    show_default=True,
    help="local and slurm backends: confine each worker to its job's files with bubblewrap (sandbox; "
    "auto: where it works on this host; on Slurm every node needs it too) or not at all (none: any job "
    "can read every user's data); docs/security.md",
)
@click.option(
    "--max-pids",
    type=click.IntRange(16, 1_000_000),
    default=1024,
    show_default=True,
    help="local and slurm backends: processes and threads one worker may have (a fork bomb stops there)",
)
@click.option(
    "--max-log-size",
    default="100Mi",
    show_default=True,
    help="local and slurm backends: log kept per worker run; past it the first half and the latest "
    "part are kept and the log says what was dropped ('none': unbounded)",
)
@click.option(
    "--resource-limits",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="local and slurm backends: keep each worker within its --memory and --cpu and --max-pids "
    "with a cgroup (auto: where cgroups work here; on: refuse to start without; off: no limits)",
)
@click.option(
    "--cgroup-root",
    metavar="CGROUP",
    help="local backend: the cgroup (a path as /proc/self/cgroup names it) under which each worker "
    "run gets its cgroup (default: paddlecloud/ under the server's own); docs/security.md",
)
@click.option(
    "--insecure-registry",
    multiple=True,
    metavar="HOST[:PORT]",
    help="local and slurm backends: a registry that job images are pulled from over plain HTTP "
    "(repeatable; loopback registries always are; every other needs verified TLS)",
)
@click.option(
    "--pass-env",
    multiple=True,
    metavar="NAME",
    help="local backend: a server environment variable workers get too (repeatable; default: locale, "
    "TLS CA paths, LD_LIBRARY_PATH)",
)
@click.option(
    "--tls-cert",
    type=_PEM,
    help="serve https with this certificate (PEM; with --tls-key); the client config and the workers' "
    "PADDLECLOUD_API become https",
)
@click.option("--tls-key", type=_PEM, help="the certificate's private key (PEM)")
@click.option(
    "--tls-ca",
    type=_PEM,
    help="the CA bundle clients and workers verify the certificate with (default: the certificate "
    "itself, for a self-signed one)",
)
@click.option(
    "--metrics-public",
    is_flag=True,
    help="serve GET /metrics without a token (it names users and running jobs: only where the port "
    "is reachable by operators alone); default: an admin's token or the scrape token; docs/metrics.md",
)
@click.option(
    "--metrics-token-file",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True, path_type=Path),
    help="a file holding a token that lets Prometheus read GET /metrics and nothing else",
)
@click.option(
    "--env-cache-size",
    default="20Gi",
    show_default=True,
    help="local: cap of the job environment cache; least recently used ones no job uses are evicted "
    "('none': no cap)",
)
@click.option(
    "--image-cache-size",
    default="50Gi",
    show_default=True,
    help="local and slurm: cap of the pulled and unpacked job images; least recently used ones no "
    "job uses are evicted after a pull ('none': no cap)",
)
@click.option(
    "--forecast-interval",
    type=click.FloatRange(1, 3600),
    default=30.0,
    show_default=True,
    metavar="S",
    help="seconds between start-time forecasts (made only when the cluster changed; docs/scheduler.md)",
)
@click.option(
    "--data-port",
    default="auto",
    show_default=True,
    metavar="PORT|auto|off",
    help="the port clients send and fetch PFS file chunks on, off the API's event loop (auto: any "
    "free one, which up prints; off: the API carries them; docs/pfs.md)",
)
@click.option(
    "-d",
    "--detach",
    is_flag=True,
    help="run in the background (log and pid file in the data dir); returns once it answers; "
    "stop it with: paddlecloud down",
)
def up(
    host: str, port: int, data_dir: Path, database: str | None, policy: str, max_package_size: str,
    max_request_size: str, datacenter: str, storage_quota: str, default_quota: str, backend: str,
    api_url: str | None, tls_cert: Path | None, tls_key: Path | None, tls_ca: Path | None, detach: bool,
    metrics_public: bool, metrics_token_file: Path | None, forecast_interval: float, data_port: str,
    **backend_options: Any,
) -> None:  # fmt: skip
    """Run the platform in the foreground (Ctrl-C stops it; jobs keep running), or with --detach in
    the background. Jobs run on this machine, or with --backend kubernetes as TrainingJobs on a
    cluster (see: paddlecloud operator)."""
    from paddlecloud.server.main import (
        BackendConfigError,
        ComputeLimits,
        DataPortError,
        ForecastSettings,
        IsolationError,
        PlatformConfig,
        backend_entry,
        open_data_port,
        prepare,
        serve,
        server_urls,
    )

    settings = _backend_settings(backend, backend_options)
    data_choice = _data_port(data_port)
    tls = _tls(tls_cert, tls_key, tls_ca)
    metrics_access = _metrics_access(metrics_public, metrics_token_file)  # before any --detach
    urls = server_urls(
        "https" if tls else "http", host, port, api_url=api_url or "",
        remote_workers=backend_entry(backend).remote_workers,
    )  # fmt: skip
    endpoint = urls.client
    data_dir = data_dir.expanduser().resolve()
    other, _stale = daemon.running(data_dir)
    if other is not None:
        raise click.ClickException(
            f"a PaddleCloud server already runs on {data_dir} at {other.url} (pid {other.pid}); "
            f"stop it first: {_down_command(data_dir)}"
        )
    if detach:  # returns in the forked server process only; up itself ends in there
        daemon.detach(data_dir, endpoint, tls[2] if tls else None, _down_command(data_dir))
    config = PlatformConfig(
        data_dir=data_dir,
        database_url=database,
        policy=policy or PlatformConfig.policy,  # none given: the server's, scheduler.DEFAULT_POLICY
        max_package_bytes=_quantity(parse_memory, max_package_size, "--max-package-size") or 0,
        max_request_bytes=_request_size(max_request_size),
        datacenter=_datacenter(datacenter),
        storage_quota=None
        if storage_quota == "none"
        else _quantity(parse_memory, storage_quota, "--storage-quota"),
        default_quota=ComputeLimits(**_limits(default_quota)),
        api_url=urls.worker,  # the workers' PADDLECLOUD_API (their task master)
        api_ca=tls[2] if tls else "",  # ... and PADDLECLOUD_API_CA
        backend=backend,
        backend_settings=settings,
        metrics_access=metrics_access,
        forecast=ForecastSettings(interval_s=forecast_interval),
    )
    try:
        ready = prepare(config, _known_tokens(config.default_user))
    except (IsolationError, BackendConfigError) as exc:  # what to change, in words
        raise click.ClickException(str(exc)) from None
    path = save_datacenter(
        Datacenter(
            name="local",
            endpoint=endpoint,
            username=config.default_user,
            token=ready.token,
            ca=tls[2] if tls else None,
        )
    )
    click.echo(f"PaddleCloud {__version__} at {endpoint}  (data: {config.data_dir}; client config: {path})")
    if urls.worker != endpoint:
        click.echo(f"workers reach it at {urls.worker} ({urls.source})")
    if urls.warning:
        click.secho(f"WARNING: {urls.warning}", fg="yellow", err=True)
    if ready.confined:
        click.echo(f"isolation: {ready.isolation}")
    else:
        click.secho(_UNCONFINED.format(why=ready.isolation), fg="red", bold=True, err=True)
    try:
        data = open_data_port(ready.app, host, port, tls[:2] if tls else None, data_choice)
    except DataPortError as exc:
        raise click.ClickException(f"{exc} (choose another with --data-port, or --data-port off)") from None
    if data is not None:
        click.echo(f"PFS data port: {data.port}")
    try:
        serve(ready.app, host, port, tls[:2] if tls else None, data)
    finally:
        if detach:
            daemon.forget(data_dir, os.getpid())


def _data_port(text: str) -> int | Literal["auto", "off"]:
    if text in ("auto", "off"):
        return "auto" if text == "auto" else "off"
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise click.BadParameter(f"{text!r}: a port 1-65535, auto or off", param_hint="--data-port")
    return int(text)


def _down_command(data_dir: Path) -> str:
    default = (Path.home() / ".paddlecloud").resolve()
    return "paddlecloud down" + ("" if data_dir == default else f" --data-dir {data_dir}")


@click.command()
@data_dir_option
@click.option(
    "--timeout",
    type=click.FloatRange(1, 600),
    default=30,
    show_default=True,
    help="seconds between SIGTERM and SIGKILL",
)
def down(data_dir: Path, timeout: float) -> None:
    """Stop the server `up --detach` started on this data dir (jobs keep running)."""
    click.echo(daemon.stop(data_dir.expanduser().resolve(), timeout))


_UNCONFINED = """WARNING: isolation: {why}
  Jobs run as this server's user with nothing between them and this machine: any user's job can
  read and change every other user's files, the database and the admin's client config (its token
  makes anyone an admin). Use this only where every user trusts every other. To confine jobs,
  install bubblewrap (Debian: apt-get install bubblewrap) and start with --isolation sandbox."""


def _backend_settings(name: str, options: dict[str, Any]) -> object:
    """The settings of backend ``name`` from the ``up`` options it reads (its registry entry: every
    option of ``up`` that is not the platform's own is a backend's); an unknown name, another
    backend's option or a bad value is a usage error saying what to change."""
    from click.core import ParameterSource

    from paddlecloud.server.main import OptionError, UnknownBackend, backend_entries, backend_entry

    try:
        chosen = backend_entry(name)
    except UnknownBackend as exc:
        raise click.BadParameter(str(exc), param_hint="--backend") from None
    ctx = click.get_current_context()
    for other in backend_entries():
        for option in other.options:
            given = ctx.get_parameter_source(option) not in (ParameterSource.DEFAULT, None)
            if given and option not in chosen.options:
                flag = "--" + option.replace("_", "-")
                owners = [e.name for e in backend_entries() if option in e.options]
                which = f"{' and '.join(owners)} backend{'s' if len(owners) > 1 else ''}"
                raise click.UsageError(f"{flag} is an option of the {which} (--backend {'|'.join(owners)})")
    try:
        return chosen.settings(options)
    except OptionError as exc:
        raise click.BadParameter(str(exc), param_hint=exc.option) from None


def _known_tokens(user: str) -> list[str]:
    """The client config's token for the local datacenter, if it belongs to ``user`` (``up`` run
    again on the same data dir hands the client the token it already has)."""
    dc = load_config().datacenters.get("local")
    return [dc.token] if dc is not None and dc.token and dc.username == user else []


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def operator(args: tuple[str, ...]) -> None:
    """Run the Kubernetes operator of TrainingJobs, in the foreground (options: --help)."""
    from paddlecloud.server.main import run_operator

    sys.exit(run_operator(list(args)))


@click.command()
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
def version(fmt: str) -> None:
    """Client and server versions."""
    client_info = {"version": __version__, "api_version": API_VERSION}
    server = Client().version()
    if fmt in ("json", "yaml"):
        emit({"client": client_info, "server": server.model_dump(mode="json")}, fmt)
        return
    click.echo(f"client: paddlecloud {__version__} (API v{API_VERSION})")
    click.echo(
        f"server: paddlecloud {server.version} (API v{server.api_version}), backend {server.backend} "
        f"[{', '.join(server.capabilities)}]"
    )
