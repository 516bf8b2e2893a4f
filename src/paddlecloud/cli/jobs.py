"""Job commands: submit, get (jobs / workers / quota), describe, logs, kill.

Each command parses options, calls one or two SDK methods and renders the result; no decisions.
Admins pass ``-u/--user NAME`` to work on another user's jobs (the server decides who may).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from paddlecloud.api.models import JobDetail, JobView, ResourceView, WorkerView
from paddlecloud.cli.batch import batch_lines, batch_options, batch_spec
from paddlecloud.cli.output import (
    FORMATS,
    age,
    console,
    emit,
    estimate_line,
    format_table,
    jobs_text,
    print_table,
    role_cell,
    storage_parts,
)
from paddlecloud.cli.tasks import summary_line, task_options, task_spec
from paddlecloud.cli.watch import watch as watch_listing
from paddlecloud.cli.watch import watch_options
from paddlecloud.client import Client
from paddlecloud.core.durations import parse_duration
from paddlecloud.core.lognoise import LogFilter
from paddlecloud.core.phases import TERMINAL_PHASES, JobPhase
from paddlecloud.core.quantity import human_memory, parse_memory

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["describe", "get", "kill", "logs", "submit"]


#: ``-u/--user NAME``: an admin works on another user's job.
user_option = click.option("-u", "--user", metavar="NAME", help="admins: another user's job")


def _env_pairs(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--env")
        out[key] = value
    return out


def _duration(text: str) -> float:
    """``--expected-duration``: seconds (the server checks the bounds and says them)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--expected-duration") from None


def _priority(text: str) -> int | str:
    """``--priority``: a number is sent as one (the API takes no numbers in strings), a name as is."""
    return int(text) if text.removeprefix("-").isdigit() and len(text) <= 20 else text


@click.command()
@click.argument("package_dir", type=click.Path(path_type=Path))
@click.option("--name", help="job name (DNS-1123 label); default: the directory's name")
@click.option("--entry", required=True, help='command each worker runs, e.g. "python train.py"')
@click.option(
    "--framework",
    type=click.Choice(["paddle-ps", "paddle-collective", "torch", "none"]),
    default="none",
    show_default=True,
)
@click.option("--trainers", "--parallelism", "trainers", type=int, default=1, show_default=True)
@click.option("--min-instance", "min_", type=int, help="elastic: fewest trainers")
@click.option("--max-instance", "max_", type=int, help="elastic: most trainers")
@click.option("--cpu", default="500m", show_default=True, help="per trainer (500m, 1, 2)")
@click.option("--memory", default="512Mi", show_default=True, help="per trainer (512Mi, 1Gi)")
@click.option("--gpu", type=int, default=0, show_default=True, help="per trainer")
@click.option("--pservers", type=int, default=0, show_default=True)
@click.option("--pscpu", default="500m", show_default=True, help="per pserver")
@click.option("--psmemory", default="512Mi", show_default=True, help="per pserver")
@click.option("--input", "input_", help="PFS path the workers read (/pfs/... or pfs:REL)")
@click.option("--output", help="PFS path the workers write (default: pfs:jobs/<name>/output)")
@click.option("--env", "env", multiple=True, help="KEY=VALUE, repeatable")
@click.option("--sampleset", help="one of your SampleSets: workers read it at $PADDLECLOUD_SAMPLESET_DIR")
@click.option(
    "--image",
    help="container image the workers run in, REGISTRY/REPOSITORY[:TAG][@DIGEST] (backends with images)",
)
@click.option(
    "--priority", default="normal", show_default=True, help="low, normal, high, or a number -1000..1000"
)
@click.option(
    "--restart-policy",
    type=click.Choice(["Never", "OnFailure", "ExitCode"]),
    help="what a failed worker (trainer or pserver) does: fail the job, restart, or restart on signals "
    "and --retry-exit-code codes only [default: Never; OnFailure for an elastic torch job's trainers]",
)
@click.option("--max-restarts", type=int, help="restarts allowed over all workers of the job [default: 3]")
@click.option("--retry-exit-code", "retry_codes", type=int, multiple=True, help="ExitCode policy: retry it")
@click.option(
    "--restart-backoff",
    type=float,
    help="seconds before a first restart, doubling [default: 1; 0 for an elastic torch job's trainers]",
)
@click.option(
    "--restart-backoff-reset",
    type=float,
    metavar="S",
    help="a worker run lasting S seconds resets its doubling backoff [default: 600]",
)
@click.option(
    "--queue-anyway",
    is_flag=True,
    help="queue the job even if no node of this (fixed-capacity) cluster could ever hold it",
)
@click.option(
    "--expected-duration",
    "expected_duration",
    metavar="DURATION",
    help="how long the job runs at its trainer count (90s, 45m, 2h, 1h30m, 3d; 1m..90d): the start-time "
    "estimates use it (`get jobs` START, `describe`)",
)
@task_options
@batch_options
@click.option("--wait", is_flag=True, help="follow the job's logs until it ends; exit 1 unless it succeeds")
@click.option(
    "-v",
    "--verbose",
    "--all-logs",
    "verbose",
    is_flag=True,
    help="--wait: every log line, the frameworks' own chatter too (hidden by default; `logs` shows all)",
)
@click.option("--json", "as_json", is_flag=True, help="print the submitted job as JSON")
def submit(
    package_dir: Path, name: str | None, wait: bool, verbose: bool, as_json: bool, **opts: Any
) -> None:
    """Upload PACKAGE_DIR and submit it as a training job."""
    trainers: dict[str, Any] = {
        "count": opts["trainers"], "cpu": opts["cpu"], "memory": opts["memory"], "gpu": opts["gpu"],
    }  # fmt: skip
    if opts["min_"] is not None:
        trainers["min"] = opts["min_"]
    if opts["max_"] is not None:
        trainers["max"] = opts["max_"]
    spec = {
        "name": name or package_dir.resolve().name.replace("_", "-").lower(),
        "entry": opts["entry"],
        "framework": opts["framework"],
        "trainers": trainers,
        "pservers": {"count": opts["pservers"], "cpu": opts["pscpu"], "memory": opts["psmemory"]},
        "env": _env_pairs(opts["env"]),
        "priority": _priority(opts["priority"]),
    }
    if opts["queue_anyway"]:
        spec["queue_anyway"] = True
    if opts["expected_duration"] is not None:
        spec["expected_duration_s"] = _duration(opts["expected_duration"])
    _add_restart_spec(spec, opts)
    if opts["input_"]:
        spec["input"] = opts["input_"]
    if opts["output"]:
        spec["output"] = opts["output"]
    if opts["sampleset"]:
        spec["sampleset"] = opts["sampleset"]
    if opts["image"]:
        spec["image"] = opts["image"]
    if (tasks := task_spec(opts)) is not None:
        spec["tasks"] = tasks
    if (batch := batch_spec(opts)) is not None:
        spec["batch"] = batch
    client = Client()
    job = client.submit(spec, package_dir=package_dir)
    if as_json:
        emit(job, "json")
    else:
        click.echo(f"job {job.name} submitted ({job.phase}: {job.message})")
    if wait:
        final = follow_job(client, job.name, verbose=verbose)
        sys.exit(0 if final.phase == JobPhase.SUCCEEDED else 1)


def _add_restart_spec(spec: dict[str, Any], opts: dict[str, Any]) -> None:
    """The restart fields: the policy of both roles, the job's limit, retryable codes and backoff."""
    if opts["restart_policy"] is not None:
        spec["trainers"]["restart"] = spec["pservers"]["restart"] = opts["restart_policy"]
    if opts["max_restarts"] is not None:
        spec["max_restarts"] = opts["max_restarts"]
    if opts["retry_codes"]:
        spec["retry_exit_codes"] = list(opts["retry_codes"])
    if opts["restart_backoff"] is not None:
        spec["restart_backoff_s"] = opts["restart_backoff"]
    if opts["restart_backoff_reset"] is not None:
        spec["restart_backoff_reset_s"] = opts["restart_backoff_reset"]


def _started(w: WorkerView) -> bool:
    """Whether a worker has been started: a process (local) or a start time (Slurm, Kubernetes),
    so it has a log to follow."""
    return w.pid is not None or w.started_at is not None


def follow_job(client: Client, name: str, poll: float = 0.5, verbose: bool = False) -> JobDetail:
    """Print phase changes and stream every worker's log until the job ends; the frameworks' own
    chatter is left out unless ``verbose`` (core/lognoise.py), and how much was is said at the end."""
    err = console(stderr=True)
    shown = _LogLines(LogFilter() if not verbose else None)
    last = ""
    streamed = False
    while True:
        job = client.job(name)
        line = f"{job.phase}: {job.reason} {job.message}".strip()
        if line != last:
            err.print(f"[bold]{name}[/bold] {line}", markup=True)
            last = line
        if job.phase in TERMINAL_PHASES:
            if not streamed and any(map(_started, job.workers)):  # it ended between two polls
                shown.write(client.logs(name))
            shown.close(err, name)
            return job
        if not streamed and any(map(_started, job.workers)):
            shown.write(client.logs(name, follow=True))
            streamed = True  # the workers ended; poll on to report the final phase
            continue
        time.sleep(poll)


class _LogLines:
    """Writes log lines to stdout as they come, through a LogFilter if there is one."""

    def __init__(self, noise: LogFilter | None) -> None:
        self.noise = noise

    def write(self, lines: Iterable[str]) -> None:
        for text in lines:
            for out in self.noise.feed(text) if self.noise else (text,):
                sys.stdout.write(out)
            sys.stdout.flush()

    def close(self, err: Console, name: str) -> None:
        if self.noise is None:
            return
        sys.stdout.writelines(self.noise.flush())
        sys.stdout.flush()
        if self.noise.hidden:
            err.print(
                f"({self.noise.hidden} lines of framework output hidden; all of them: "
                f"paddlecloud logs {name}, or submit --verbose)",
                markup=False,
            )


@click.group()
def get() -> None:
    """List jobs, a job's workers, or your quota."""


@get.command("jobs")
@click.option("-a", "--all", "all_", is_flag=True, help="include finished jobs")
@click.option("--all-users", is_flag=True, help="admins: every user's jobs")
@click.option("-u", "--user", metavar="NAME", help="admins: that user's jobs")
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
@watch_options
def get_jobs(all_: bool, all_users: bool, user: str | None, fmt: str, watch: bool, interval: float) -> None:
    if all_users and user:
        raise click.UsageError("--all-users and --user exclude each other")
    client = Client()

    def fetch() -> list[JobView]:
        return client.jobs(all=all_, all_users=all_users, user=user)

    def table(jobs: Sequence[JobView]) -> str:
        return jobs_text(list(jobs), wide=fmt == "wide", show_user=all_users)

    if watch:
        watch_listing(fetch, table, fmt, interval, "paddlecloud get jobs")
    elif fmt in ("json", "yaml"):
        emit(fetch(), fmt)
    else:
        click.echo(table(fetch()))


def _workers_text(workers: Sequence[WorkerView], wide: bool) -> str:
    headers = ["NAME", "STATE", "NODE", "ENDPOINT", "PID", "EXIT", "REASON", "AGE"]
    if wide:
        headers += ["RESTARTS", "MESSAGE", "LOG"]
    rows = []
    for w in workers:
        exit_code = "-" if w.exit_code is None else str(w.exit_code)
        row = [w.name, str(w.state), w.node, w.endpoint, str(w.pid or "-"), exit_code, str(w.reason) or "-",
               age(w.started_at)]  # fmt: skip
        if wide:
            row += [str(w.restarts), w.message or "-", w.log]
        rows.append(row)
    return format_table(headers, rows)


@get.command("workers")
@click.argument("job")
@user_option
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
@watch_options
def get_workers(job: str, user: str | None, fmt: str, watch: bool, interval: float) -> None:
    client = Client()

    def fetch() -> list[WorkerView]:
        return client.workers(job, user=user)

    def table(workers: Sequence[WorkerView]) -> str:
        return _workers_text(workers, wide=fmt == "wide")

    if watch:
        watch_listing(fetch, table, fmt, interval, f"paddlecloud get workers {job}")
    elif fmt in ("json", "yaml"):
        emit(fetch(), fmt)
    else:
        click.echo(table(fetch()))


@get.command("quota")
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
def get_quota(fmt: str) -> None:
    client = Client()
    q = client.quota()
    if fmt in ("json", "yaml"):
        emit(q, fmt)
        return
    rows = [
        [res, _for_people(res, q.used), _for_people(res, q.limit), _for_people(res, q.cluster)]
        for res in ("cpu", "memory", "gpu")
    ]
    storage = client.pfs.usage()
    limit_text = human_memory(storage.limit) if storage.limit is not None else "unlimited"
    rows.append(["storage", human_memory(storage.used + storage.reserved), limit_text, "-"])
    print_table(["RESOURCE", "USED", "LIMIT", "CLUSTER"], rows)
    click.echo(f"user {q.user}: {q.jobs_running} running, {q.jobs_queued} queued")
    click.echo(storage_parts(storage))


def _for_people(res: str, view: ResourceView | None) -> str:
    """One resource of a quota view as a person reads it: memory ``23.5Gi`` (the API's exact
    ``24683656Ki`` rounded down), ``unlimited`` for no limit."""
    value = None if view is None else str(getattr(view, res))
    if value is None or value in ("-1", "unlimited"):
        return "unlimited"
    return human_memory(parse_memory(value)) if res == "memory" else value


@click.command()
@click.argument("job")
@click.argument("name", required=False)
@user_option
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
def describe(job: str, name: str | None, user: str | None, fmt: str) -> None:
    """A job's spec, state, workers and event history (``describe sampleset NAME``: a SampleSet)."""
    if name is not None:
        if job != "sampleset":
            raise click.UsageError(f"describe takes one job name, or `sampleset NAME` (got {job!r} {name!r})")
        from paddlecloud.cli.samplesets import describe_sampleset

        describe_sampleset(name, fmt)
        return
    client = Client()
    d = client.job(job, user=user)
    if fmt in ("json", "yaml"):
        emit(d, fmt)
        return
    out = console()
    out.print(f"[bold]Name:[/bold]       {d.name}   [bold]User:[/bold] {d.user}")
    out.print(f"[bold]Phase:[/bold]      {d.phase}   {d.reason}: {d.message}", markup=True)
    out.print(f"[bold]Framework:[/bold]  {d.framework}   entry: {d.spec.entry}")
    out.print(f"[bold]Trainers:[/bold]   {role_cell(d.trainers)} (cpu {d.spec.trainers.cpu}, "
              f"memory {d.spec.trainers.memory}, gpu {d.spec.trainers.gpu})")  # fmt: skip
    if d.spec.pservers.count:
        out.print(f"[bold]Pservers:[/bold]   {role_cell(d.pservers)} (cpu {d.spec.pservers.cpu}, "
                  f"memory {d.spec.pservers.memory})")  # fmt: skip
    if restart := _restart_line(d):
        out.print(f"[bold]Restarts:[/bold]   {restart}", markup=True)
    for label, text in batch_lines(d.spec.batch, d.adaptive):
        out.print(f"[bold]{label + ':':<11}[/bold] {text}", markup=True)
    out.print(f"[bold]Submitted:[/bold]  {d.submitted_at:%Y-%m-%d %H:%M:%S}Z   started: "
              f"{age(d.started_at)} ago   finished: {age(d.finished_at)} ago")  # fmt: skip
    if (eta := estimate_line(d)) is not None:
        from rich.markup import escape

        out.print(f"[bold]Estimate:[/bold]   {escape(eta)}")
    if d.spec.input:
        out.print(f"[bold]Input:[/bold]      {d.spec.input}")
    if d.spec.sampleset:
        out.print(f"[bold]SampleSet:[/bold]  {d.spec.sampleset}   (at $PADDLECLOUD_SAMPLESET_DIR, read-only)")
    if d.spec.tasks is not None:
        out.print(
            f"[bold]Tasks:[/bold]      {summary_line(client.tasks.status(job, user=user, limit=0).summary)}"
        )
    out.print(f"[bold]Output:[/bold]     {d.spec.output}   (fetch: paddlecloud pfs cp -r {d.spec.output} .)")
    if d.workers:
        out.print("\n[bold]Workers[/bold]")
        print_table(
            ["NAME", "STATE", "NODE", "ENDPOINT", "PID", "EXIT", "RESTARTS", "REASON"],
            [
                [
                    w.name,
                    str(w.state),
                    w.node,
                    w.endpoint,
                    str(w.pid or "-"),
                    "-" if w.exit_code is None else str(w.exit_code),
                    str(w.restarts),
                    f"{w.reason}: {w.message}" if w.reason and w.message else str(w.reason) or "-",
                ]
                for w in d.workers
            ],
        )
    out.print("\n[bold]Events[/bold]")
    print_table(
        ["TIME", "TYPE", "REASON", "MESSAGE"],
        [[f"{e.time:%H:%M:%S}", e.type, e.reason, e.message] for e in d.events],
    )


def _restart_line(d: JobDetail) -> str:
    """``trainers OnFailure, pservers Never; at most 3 per job, backoff 1 s doubling to 30 s``, or ""."""
    rules = d.spec.restart_rules()
    t, p = rules.trainer, rules.pserver
    if t == p == "Never":
        return ""
    codes = (
        f"; retried exit codes {', '.join(map(str, d.spec.retry_exit_codes))}"
        if d.spec.retry_exit_codes
        else ""
    )
    return (
        f"trainers {t}, pservers {p}; at most {d.spec.max_restarts} per job, backoff "
        f"{rules.backoff_s:g} s doubling to {rules.backoff_max_s:g} s{codes}"
    )


@click.command()
@click.argument("job")
@click.option("-n", "--tail", type=int, help="last N lines of each worker")
@click.option("-f", "--follow", is_flag=True, help="keep printing until the workers end")
@click.option("-w", "--worker", help="one worker, e.g. trainer-0 (default: all); 'prepare': env build")
@click.option("--previous", is_flag=True, help="the worker's previous run")
@user_option
def logs(
    job: str, tail: int | None, follow: bool, worker: str | None, previous: bool, user: str | None
) -> None:
    """Print a job's logs (every worker's lines prefixed with its name)."""
    client = Client()
    if follow:  # a queued job has no workers yet: wait for them, bounded by the job's end
        while (d := client.job(job, user=user)).phase == JobPhase.QUEUED or (
            d.phase == JobPhase.STARTING and not any(map(_started, d.workers)) and worker != "prepare"
        ):
            time.sleep(0.5)
    for line in client.logs(job, worker=worker, tail=tail, follow=follow, previous=previous, user=user):
        sys.stdout.write(line)
    sys.stdout.flush()


@click.command()
@click.argument("job")
@click.option("--rm", "remove", is_flag=True, help="also delete the job from the history")
@click.option("--grace", type=float, help="seconds between SIGTERM and SIGKILL (default: server's)")
@user_option
def kill(job: str, remove: bool, grace: float | None, user: str | None) -> None:
    """Stop every process of a job; with --rm also forget it."""
    from paddlecloud.api.errors import Conflict

    client = Client()
    try:
        view = client.kill(job, grace, user=user)
        click.echo(f"job {job} {view.phase}")
    except Conflict:
        if not remove:
            raise
    if remove:
        client.delete(job, user=user)
        click.echo(f"job {job} deleted")
