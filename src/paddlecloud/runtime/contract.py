"""The names of the environment variables every worker process receives (the env contract).

This module is the single source of those names: ``paddlecloud.core.envcontract`` builds the values on
the platform side, ``paddlecloud.runtime.env`` reads them inside the worker. ``docs/env-contract.md``
documents each one. Standard library only: it is imported inside job virtual environments.
"""

from __future__ import annotations

__all__ = [
    "API",
    "API_CA",
    "API_SOCKET",
    "BATCH_INIT",
    "BATCH_MAX",
    "BATCH_MIN",
    "BATCH_SIZE",
    "CHECKPOINT_DIR",
    "CURRENT_ENDPOINT",
    "ENDPOINTS_DIR",
    "ENDPOINTS_TIMEOUT",
    "ENDPOINTS_WAIT",
    "INPUT",
    "INPUT_DIR",
    "JOB_NAME",
    "JOB_TOKEN",
    "JOB_USER",
    "LISTEN_PORT",
    "LR_RULE",
    "MEMBERSHIP_FILE",
    "OUTPUT",
    "OUTPUT_DIR",
    "PACKAGE_URL",
    "POD_IP",
    "PORT",
    "PSERVERS",
    "PSERVER_ENDPOINTS",
    "PUBLISH_HOST",
    "RDZV_KEY",
    "RESTART",
    "ROLE",
    "TRAINERS",
    "TRAINER_ENDPOINTS",
    "TRAINER_ID",
    "WORKER",
]

PREFIX = "PADDLECLOUD_"
JOB_NAME = PREFIX + "JOB_NAME"
JOB_USER = PREFIX + "JOB_USER"
ROLE = PREFIX + "ROLE"
WORKER = PREFIX + "WORKER"
TRAINER_ID = PREFIX + "TRAINER_ID"
TRAINERS = PREFIX + "TRAINERS"
PSERVERS = PREFIX + "PSERVERS"
PSERVER_ENDPOINTS = PREFIX + "PSERVER_ENDPOINTS"
TRAINER_ENDPOINTS = PREFIX + "TRAINER_ENDPOINTS"
CURRENT_ENDPOINT = PREFIX + "CURRENT_ENDPOINT"
PORT = PREFIX + "PORT"
POD_IP = PREFIX + "POD_IP"
OUTPUT_DIR = PREFIX + "OUTPUT_DIR"
OUTPUT = PREFIX + "OUTPUT"
INPUT_DIR = PREFIX + "INPUT_DIR"
INPUT = PREFIX + "INPUT"
CHECKPOINT_DIR = PREFIX + "CHECKPOINT_DIR"
RESTART = PREFIX + "RESTART"
#: the platform's API URL and this job's token: the data task master (``runtime.taskmaster``)
API = PREFIX + "API"
JOB_TOKEN = PREFIX + "JOB_TOKEN"
#: a CA bundle to verify an https PADDLECLOUD_API with (set when the server runs with TLS)
API_CA = PREFIX + "API_CA"
#: where a worker in a network namespace of its own reaches the API: a Unix socket that carries
#: requests to PADDLECLOUD_API (``runtime.apiclient``); unset where PADDLECLOUD_API is reachable
API_SOCKET = PREFIX + "API_SOCKET"
#: elastic torch jobs: the job's secret key (hex) that signs the state of its torch rendezvous
#: (``runtime.torchelastic``): the same for every trainer of the job, for the whole life of the job
#: (restarts, resizes, a server restart); chosen at random by the backend when the job starts
RDZV_KEY = PREFIX + "RDZV_KEY"
#: the job's current membership (trainers and endpoints now), rewritten on every resize
#: (``runtime.membership``); empty where the backend does not publish it
MEMBERSHIP_FILE = PREFIX + "MEMBERSHIP_FILE"
#: endpoints resolved at run time (``runtime.endpoints``): where workers publish their hosts, whose
#: hosts this worker waits for before its program starts, for how long (seconds), and the host this
#: worker publishes (default: the hostname); unset where every endpoint is known at start
ENDPOINTS_DIR = PREFIX + "ENDPOINTS_DIR"
ENDPOINTS_WAIT = PREFIX + "ENDPOINTS_WAIT"
ENDPOINTS_TIMEOUT = PREFIX + "ENDPOINTS_TIMEOUT"
PUBLISH_HOST = PREFIX + "PUBLISH_HOST"
#: the port a server (pserver, the rendezvous store) will listen on, where the backend chose it
#: without seeing the node (Slurm): the launcher checks it bindable there before the program
#: starts, and says ``PortHeld`` in the run's status when it is not
LISTEN_PORT = PREFIX + "LISTEN_PORT"
#: backends whose workers fetch the job package (``FETCH_PACKAGE``): its URL, read with JOB_TOKEN
#: by ``runtime.bootstrap fetch``
PACKAGE_URL = PREFIX + "PACKAGE_URL"
#: adaptive-batch jobs (``JobSpec.batch.adaptive``): the global batch assigned when this worker was
#: started, the bounds, the batch the job started with, and its learning-rate rule (adascale,
#: linear, sqrt, none). The assignment changes while the job runs: read it from the API
#: (``GET /api/v1/jobs/<name>/adaptive`` with JOB_TOKEN); unset for other jobs
BATCH_SIZE = PREFIX + "BATCH_SIZE"
BATCH_MIN = PREFIX + "BATCH_MIN"
BATCH_MAX = PREFIX + "BATCH_MAX"
BATCH_INIT = PREFIX + "BATCH_INIT"
LR_RULE = PREFIX + "LR_RULE"
