"""What runs on a node beside a job's workers, as the platform: the run monitor and what it sets up.

A worker run on the local backend (and on each Slurm node) is started through
:mod:`~paddlecloud.node.monitor`, a small process that owns the run the way a container monitor
(conmon) owns a container::

    backend ──cgroups.Hierarchy.create(name, Limits)──▶ RunCgroup   memory, CPU, pids of the run
            ──netns.ensure(JobNet)───────────────────▶ the job's network namespace on this host
            ──spawn──▶ python -I -m paddlecloud.node.monitor --log FILE --cgroup DIR ... -- SANDBOX ARGV
                       monitor: joins the cgroup, relays the platform's API into the sandbox
                       (``apirelay``), runs SANDBOX ARGV inside the job's network namespace and pumps
                       its output into the log, bounded (``logcap``); exits as the sandbox did

Everything here uses only the standard library and is cheap to import: the monitor's start-up is
part of every worker's start. Nothing here knows about jobs in the database or the scheduler.
"""

from __future__ import annotations
