"""Table tests of the pure TrainingJob reconcile (``backends/kubernetes/objects.py``).

Each test drives a ``Cluster`` (tests/unit/kube_helpers.py): reconcile, apply the ObjectPlan, play the
kubelet (pods Running / Ready / exiting), reconcile again, and look at the objects and the status.
"""

from __future__ import annotations

from typing import Any

import pytest
from kube_helpers import T0, Cluster, training_job

from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes.objects import Delete, reconcile


def started(**spec: Any) -> Cluster:
    """A job whose pservers and trainers are all running."""
    c = Cluster(training_job(**spec))
    c.step()
    c.run(*[w for w in c.workers() if w.startswith("pserver")])
    c.step()
    c.run(*[w for w in c.workers() if w.startswith("trainer")])
    c.step()
    assert c.status["phase"] == "Running", c.status
    return c


# -- creation and start order -----------------------------------------------------------------


def test_first_reconcile_creates_services_and_pservers_only() -> None:
    c = Cluster(training_job())
    plan = c.step()
    kinds = [(o["kind"], o["metadata"]["name"]) for o in plan.create]
    assert kinds == [
        ("NetworkPolicy", "fit"),  # before any pod: none runs without it
        ("Service", "fit-pserver-0"),
        ("Service", "fit-pserver-1"),
        ("Service", "fit-trainers"),
        ("Pod", "fit-pserver-0"),
        ("Pod", "fit-pserver-1"),
    ]
    assert not plan.trainers_may_start
    assert plan.finalizer is None  # the job already has it
    st = c.status
    assert (st["phase"], st["reason"]) == ("Pending", "Creating")
    assert st["startTime"] and st["observedGeneration"] == 1
    assert st["selector"] == "paddlecloud.org/job=fit,paddlecloud.org/role=trainer"


def test_a_job_without_the_finalizer_gets_it() -> None:
    job = training_job()
    job["metadata"]["finalizers"] = []
    assert reconcile(job, [], [], T0).finalizer == "add"


def test_trainers_wait_for_every_pserver_to_be_ready() -> None:
    c = Cluster(training_job())
    c.step()
    c.initializing("pserver-0", "install")
    c.step()
    assert (c.status["reason"], c.status["message"]) == (
        "Initializing",
        "pserver-0: installing requirements.txt",
    )
    c.run("pserver-0")
    c.run("pserver-1", ready=False)
    plan = c.step()
    assert not plan.trainers_may_start and not plan.create
    assert c.status["phase"] == "Starting"
    assert c.status["reason"] == "WaitingForPservers"
    assert c.status["message"] == "waiting for pserver-1 to be ready (1 of 2 ready)"
    c.run("pserver-1")
    plan = c.step()
    assert plan.trainers_may_start
    assert [o["metadata"]["name"] for o in plan.create] == ["fit-trainer-0", "fit-trainer-1"]
    c.run("trainer-0", "trainer-1")
    c.step()
    assert (c.status["phase"], c.status["message"]) == ("Running", "2 pservers and 2 trainers running")
    assert c.status["trainers"] == {"desired": 2, "active": 2, "ready": 2, "succeeded": 0, "failed": 0}
    assert [e[1] for e in c.events] == ["Creating", "Initializing", "WaitingForPservers", "ContainerCreating",
                                        "Running"]  # fmt: skip


def test_reconcile_is_idempotent() -> None:
    c = started()
    before = c.status
    plan = c.step()
    assert not plan.create and not plan.delete and not plan.stop and not plan.events
    assert plan.status == before


def test_collective_jobs_start_trainers_at_once() -> None:
    c = Cluster(training_job(framework="torch", pserver={"replicas": 0}))
    plan = c.step()
    assert [o["metadata"]["name"] for o in plan.create if o["kind"] == "Pod"] == [
        "fit-trainer-0",
        "fit-trainer-1",
    ]
    assert plan.trainers_may_start


# -- why a job waits --------------------------------------------------------------------------


def test_pending_job_says_why_from_the_scheduler() -> None:
    c = Cluster(training_job())
    c.step()
    c.unschedulable("pserver-1", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    c.step()
    st = c.status
    assert (st["phase"], st["reason"]) == ("Pending", "Unschedulable")
    assert st["message"] == "pserver-1: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    cond = next(x for x in st["conditions"] if x["status"] == "True")
    assert (cond["type"], cond["reason"]) == ("Pending", "Unschedulable")


def test_a_stuck_container_is_the_reason() -> None:
    c = Cluster(training_job())
    c.step()
    c.waiting("pserver-0", "ImagePullBackOff", 'Back-off pulling image "nope:1"')
    c.step()
    assert (c.status["phase"], c.status["reason"]) == ("Starting", "ImagePullBackOff")
    assert c.status["message"] == 'pserver-0: worker: Back-off pulling image "nope:1"'


def test_volcano_podgroup_condition_is_read() -> None:
    c = Cluster(training_job(scheduling={"schedulerName": "volcano", "queue": "team-a"}))
    plan = c.step()
    group = next(o for o in plan.create if o["kind"] == "PodGroup")
    assert group["spec"] == {"minMember": 4, "queue": "team-a"}
    # a gang cannot start in part: every pod at once, trainers wait for pservers in their init container
    assert [o["metadata"]["name"] for o in plan.create if o["kind"] == "Pod"] == [
        "fit-pserver-0", "fit-pserver-1", "fit-trainer-0", "fit-trainer-1"]  # fmt: skip
    c.podgroups["fit"]["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "Unschedulable", "status": "True", "message": "4/4 tasks in gang unschedulable"}
        ],
    }
    c.step()
    assert (c.status["phase"], c.status["reason"]) == ("Pending", "PodGroupPending")
    assert c.status["message"] == "PodGroup fit: 4/4 tasks in gang unschedulable"


# -- scaling ----------------------------------------------------------------------------------


def test_scale_up_creates_the_missing_indices() -> None:
    c = started(trainer={"replicas": 2, "min": 1, "max": 4})
    c.job["spec"]["trainer"]["replicas"] = 4
    plan = c.step()
    assert [o["metadata"]["name"] for o in plan.create] == ["fit-trainer-2", "fit-trainer-3"]
    env = c.env("trainer-3")
    assert env["PADDLECLOUD_TRAINERS"] == "4" and env["PADDLECLOUD_TRAINER_ID"] == "3"
    assert c.status["trainers"]["desired"] == 4


def test_scale_down_removes_the_highest_indices_first_with_grace() -> None:
    c = started(trainer={"replicas": 4, "min": 1, "max": 4}, terminationGracePeriodSeconds=45)
    c.job["spec"]["trainer"]["replicas"] = 1
    plan = c.step(keep_deleting=True)
    assert plan.delete == (
        Delete("Pod", "fit-trainer-3", 45, "ScaleDown"),
        Delete("Pod", "fit-trainer-2", 45, "ScaleDown"),
        Delete("Pod", "fit-trainer-1", 45, "ScaleDown"),
    )
    # the removed trainers exit non-zero on SIGTERM: that never fails the job
    c.exit("trainer-3", 143)
    c.step()
    assert c.status["phase"] == "Running" and c.status["trainers"]["desired"] == 1


def test_replicas_are_clamped_to_the_elastic_bounds() -> None:
    c = started(trainer={"replicas": 2, "min": 2, "max": 3})
    c.job["spec"]["trainer"]["replicas"] = 10
    plan = c.step()
    assert [o["metadata"]["name"] for o in plan.create] == ["fit-trainer-2"]


# -- failures and restarts --------------------------------------------------------------------


def test_failed_trainer_restarts_under_on_failure() -> None:
    c = started(restartPolicy="OnFailure", restartBackoffSeconds=0)
    c.exit("trainer-1", 3, message="Traceback ...\nValueError: boom")
    plan = c.step()
    assert plan.delete == (Delete("Pod", "fit-trainer-1", 0, "Restart"),)
    assert c.status["restartCount"] == 1 and c.status["workerRuns"] == {"trainer-1": 1}
    assert c.status["lastFailure"]["message"].endswith("ValueError: boom")
    assert (c.status["phase"], c.status["reason"]) == ("Running", "Restarting")
    restarted = [e for e in c.events if e[1] == "WorkerRestarted"]
    assert restarted and restarted[0][2].startswith(
        "trainer-1 failed with exit code 3; restarting it as run 1"
    )
    plan = c.step()  # the pod is gone: created again under the same name as run 1
    pod = next(o for o in plan.create if o["kind"] == "Pod")
    assert pod["metadata"]["name"] == "fit-trainer-1"
    assert pod["metadata"]["labels"][crd.LABEL_RUN] == "1"
    assert c.env("trainer-1")["PADDLECLOUD_RESTART"] == "1"
    c.run("trainer-1")
    c.step()
    assert (c.status["phase"], c.status["reason"]) == ("Running", "Running")


def test_restart_waits_for_the_backoff() -> None:
    c = started(restartPolicy="OnFailure", restartBackoffSeconds=5)
    c.exit("trainer-0", 1)
    plan = c.step()
    assert not plan.delete and plan.requeue_after == pytest.approx(5)
    c.now += 5
    assert c.step().delete == (Delete("Pod", "fit-trainer-0", 0, "Restart"),)


def test_a_restart_decided_but_not_applied_is_not_counted_twice() -> None:
    c = started(restartPolicy="OnFailure", restartBackoffSeconds=0)
    c.exit("trainer-1", 3)
    first = c.step(keep_deleting=True)  # the pod lingers (being deleted)
    assert c.status["restartCount"] == 1
    c.pod("trainer-1")["metadata"].pop("deletionTimestamp")  # as if the delete had failed
    again = c.step()
    assert again.delete == first.delete
    assert c.status["restartCount"] == 1 and c.status["workerRuns"] == {"trainer-1": 1}


def test_never_policy_fails_the_job_and_keeps_the_pods() -> None:
    c = started()
    c.exit("trainer-1", 3, message="ValueError: boom")
    plan = c.step()
    st = c.status
    assert (st["phase"], st["reason"]) == ("Failed", "WorkerFailed")
    assert st["message"] == "trainer-1 failed with exit code 3 [Error]"
    assert st["completionTime"] and st["lastFailure"]["exitCode"] == 3
    # cleanPodPolicy None: running pods are stopped in place, nothing is deleted (logs stay)
    assert not plan.delete
    assert sorted(plan.stop) == ["fit-pserver-0", "fit-pserver-1", "fit-trainer-0"]
    assert ("Warning", "WorkerFailed", st["message"]) in c.events
    # once stopped they are not stopped again
    c.step()
    assert c.plans[-1].stop == ()


def test_backoff_limit_fails_the_job() -> None:
    c = started(restartPolicy="OnFailure", restartBackoffSeconds=0, backoffLimit=1)
    c.exit("trainer-0", 1)
    c.step()
    c.step()
    c.run("trainer-0")
    c.exit("trainer-1", 1)
    c.step()
    st = c.status
    assert (st["phase"], st["reason"]) == ("Failed", "BackoffLimitExceeded")
    assert "restart limit 1 reached" in st["message"]


@pytest.mark.parametrize(("code", "phase"), [(2, "Failed"), (75, "Running"), (137, "Running")])
def test_exit_code_policy(code: int, phase: str) -> None:
    c = started(restartPolicy="ExitCode", retryExitCodes=[75], restartBackoffSeconds=0)
    c.exit("trainer-0", code)
    c.step()
    assert c.status["phase"] == phase


def test_an_init_container_failure_says_which() -> None:
    c = Cluster(training_job())
    c.step()
    c.exit("pserver-0", 1, message="fetch: fetching the package: HTTP 401", container="fetch")
    c.step()
    assert c.status["phase"] == "Failed"
    assert c.status["message"] == "pserver-0 failed with exit code 1 [Error in init container fetch]"


def test_an_evicted_pod_is_a_lost_worker() -> None:
    c = started(restartPolicy="ExitCode", restartBackoffSeconds=0)
    c.pod("trainer-0")["status"] = {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}
    c.step()
    assert c.status["restartCount"] == 1
    assert c.status["lastFailure"]["reason"] == "Evicted"


# -- the end ----------------------------------------------------------------------------------


def test_success_stops_the_pservers_and_ttl_deletes_the_job() -> None:
    c = started(ttlSecondsAfterFinished=60)
    c.exit("trainer-0", 0)
    c.step()
    assert c.status["phase"] == "Running"
    c.exit("trainer-1", 0)
    plan = c.step()
    st = c.status
    assert (st["phase"], st["reason"], st["message"]) == (
        "Succeeded",
        "Completed",
        "all 2 trainers succeeded",
    )
    assert sorted(plan.stop) == ["fit-pserver-0", "fit-pserver-1"]
    assert plan.requeue_after == pytest.approx(60) and not plan.delete_job
    for w in ("pserver-0", "pserver-1"):  # the kubelet kills them at their deadline: not failures
        c.pod(w)["status"] = {"phase": "Failed", "reason": "DeadlineExceeded"}
    c.step()
    assert c.status["pservers"]["failed"] == 0 and c.status["phase"] == "Succeeded"
    c.now += 60
    assert c.step().delete_job


def test_clean_pod_policy_running_deletes_running_pods() -> None:
    c = started(cleanPodPolicy="Running")
    c.exit("trainer-0", 0)
    c.exit("trainer-1", 0)
    plan = c.step()
    assert [d.name for d in plan.delete] == ["fit-pserver-0", "fit-pserver-1"]
    assert not plan.stop


def test_clean_pod_policy_all_deletes_everything() -> None:
    c = started(cleanPodPolicy="All")
    c.exit("trainer-1", 9)
    plan = c.step()
    assert c.status["phase"] == "Failed"
    assert {(d.kind, d.name) for d in plan.delete} == {
        ("Pod", "fit-pserver-0"), ("Pod", "fit-pserver-1"),
        ("Pod", "fit-trainer-0"), ("Pod", "fit-trainer-1"),
        ("Service", "fit-pserver-0"), ("Service", "fit-pserver-1"), ("Service", "fit-trainers"),
    }  # fmt: skip


def test_unbound_pods_are_deleted_not_stopped_at_the_end() -> None:
    c = Cluster(training_job(activeDeadlineSeconds=100))
    c.step()
    c.unschedulable("pserver-0", "0/1 nodes are available")
    c.run("pserver-1")
    c.now += 100
    plan = c.step()
    assert (c.status["phase"], c.status["reason"]) == ("Failed", "DeadlineExceeded")
    assert [d.name for d in plan.delete] == ["fit-pserver-0"] and plan.stop == ("fit-pserver-1",)


def test_deadline_requeues_until_it_passes() -> None:
    c = Cluster(training_job(activeDeadlineSeconds=100))
    assert c.step().requeue_after == pytest.approx(100)


def test_deleting_the_job_deletes_pods_then_releases_the_finalizer() -> None:
    c = started()
    c.job["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    plan = c.step(keep_deleting=True)
    assert {d.name for d in plan.delete if d.kind == "Pod"} == {
        "fit-pserver-0", "fit-pserver-1", "fit-trainer-0", "fit-trainer-1"}  # fmt: skip
    assert plan.finalizer is None and plan.requeue_after
    for name in list(c.pods):
        del c.pods[name]
    assert c.step().finalizer == "remove"


def test_an_invalid_job_fails_with_the_reason() -> None:
    c = Cluster(training_job(name="9lives"))
    plan = c.step()
    assert (c.status["phase"], c.status["reason"]) == ("Failed", "InvalidSpec")
    assert "DNS-1035" in c.status["message"] and not plan.create


def test_pods_of_other_jobs_are_ignored() -> None:
    c = started()
    other = Cluster(training_job(name="other"))
    other.step()
    policies = [*c.policies.values(), *other.policies.values()]
    plan = reconcile(c.job, [*c.pods.values(), *other.pods.values()], list(c.services.values()), c.now,
                     policies=policies)  # fmt: skip
    assert not plan.create and not plan.delete
    mine = reconcile(c.job, list(c.pods.values()), list(c.services.values()), c.now,
                     policies=list(other.policies.values()))  # fmt: skip
    assert [o["kind"] for o in mine.create] == ["NetworkPolicy"]  # another job's policy is not this one's
