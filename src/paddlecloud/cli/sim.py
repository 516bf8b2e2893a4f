"""``paddlecloud sim``: replay workloads on a virtual cluster with the live scheduler's policies.

Runs in the client process (no server needed); the work is ``paddlecloud.sim.runner``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from paddlecloud.cli.output import print_table

__all__ = ["sim"]

POLICIES = ["fifo", "fifo-backfill", "tiresias", "edl", "elastic"]


@click.command()
@click.argument("workloads", nargs=-1)
@click.option("--policy", "policies", multiple=True, type=click.Choice(POLICIES), default=["elastic"],
              show_default=True, help="repeat to compare")  # fmt: skip
@click.option(
    "--format", "fmt", type=click.Choice(["pollux", "philly", "edl"]), default="pollux", show_default=True
)
@click.option("--nodes", type=click.IntRange(1, 100_000), help="default: 16 (Pollux) / 24 (EDL)")
@click.option("--gpus-per-node", type=click.IntRange(0, 64), help="default: 4")
@click.option("--traces", type=click.Path(exists=True, file_okay=False), help="Pollux job profiles")
@click.option("--limit", type=int, default=1000, show_default=True, help="Philly: the N earliest jobs")
@click.option(
    "--summary-json", type=click.Path(dir_okay=False, path_type=Path), help="write all figures here"
)
def sim(
    workloads: tuple[str, ...], policies: tuple[str, ...], fmt: str, nodes: int | None,
    gpus_per_node: int | None, traces: str | None, limit: int, summary_json: Path | None,
) -> None:  # fmt: skip
    """Simulate WORKLOAD files (Pollux CSVs, philly.csv) or the EDL scenario (--format edl)."""
    from paddlecloud.sim.runner import RunSpec, run

    for w in workloads:
        if not Path(w).is_file():
            raise click.BadParameter(f"{w}: no such file", param_hint="WORKLOADS")
    try:
        results = run(RunSpec(list(workloads), list(policies), fmt, traces, nodes, gpus_per_node, limit))
    except (ValueError, KeyError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    rows = []
    for pol, per in results.items():
        m = per["mean"]
        rows.append([pol, f"{m['avg_jct_s']:.0f}", f"{m['p99_jct_s']:.0f}", f"{m['avg_queue_s']:.0f}",
                     f"{m['makespan_s']:.0f}", f"{m['gpu_util']:.2f}", f"{m['resizes']:.0f}",
                     f"{m['preemptions']:.0f}"])  # fmt: skip
    click.echo(f"mean over {len(next(iter(results.values()))) - 1} workload(s):")
    print_table(
        ["POLICY", "AVG JCT s", "P99 JCT s", "AVG QUEUE s", "MAKESPAN s", "UTIL", "RESIZES", "PREEMPT"], rows
    )
    if summary_json:
        summary_json.write_text(json.dumps(results, indent=2))
        click.echo(f"summary: {summary_json}")
