"""Deleting a user: a use case that spans the user directory, the jobs and the files, so it lives
above the three services (each knows nothing of the others) rather than in the lowest of them.

    UserDeletion(users, jobs, files).delete(who, name, force, delete_files)
      users.lock_out        active jobs (Queued, Starting, Running) and not force: 409 user_has_jobs
                            (names them); else a new token nobody sees, no longer admin; committed
      jobs.kill             the active ones at once (force: their grace periods overlap)
      jobs.delete           every job of the user with its logs, tasks and package (a few rounds: a
                            submit that raced the lock-out is found by the next)
      files.remove_home     only with delete_files (else kept: admins still read
                            /pfs/<dc>/home/NAME, and a new user of that name gets it)
      users.forget          their SampleSets marked deleting (the SampleSet loop unmounts and removes
                            them), the user row removed (the name is free again)
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from paddlecloud.api.errors import Conflict, NotFound
from paddlecloud.api.users import UserDeleted
from paddlecloud.controller.model.identity import Identity
from paddlecloud.controller.services.files import FileService
from paddlecloud.controller.services.jobs import JobService
from paddlecloud.controller.services.users import UserDirectory

__all__ = ["UserDeletion"]

#: rounds of removing a deleted user's jobs (a submit that raced the lock-out is found by the next)
ROUNDS = 3
#: jobs killed at once (their grace periods run together, not in turn)
KILLERS = 8


@dataclass(frozen=True)
class UserDeletion:
    users: UserDirectory
    jobs: JobService
    files: FileService

    def delete(
        self, who: Identity, name: str, *, force: bool = False, delete_files: bool = False
    ) -> UserDeleted:
        """Delete user ``name`` (module doc): their jobs go, their home stays unless ``delete_files``."""
        with self.jobs.ctx.session() as s:
            active = self.users.lock_out(s, who, name, force=force)
        done = UserDeleted(name=name, killed=active, home_path=str(self.files.home(name)))
        with ThreadPoolExecutor(max_workers=KILLERS) as pool:
            for job in active:
                pool.submit(self._kill_quietly, who, job, name)
        for _ in range(ROUNDS):
            with self.jobs.ctx.session() as s:
                left = self.users.jobs_of(s, name)
            if not left:
                break
            for job in left:
                try:
                    self.jobs.delete(who, job, user=name)  # kills it first if it is still active
                except (NotFound, Conflict):  # it ended or went meanwhile: the next round sees
                    continue
                done.jobs_removed += 1
        if delete_files and self.files.remove_home(name):
            done.home = "deleted"
        with self.jobs.ctx.session() as s:
            self.users.forget(s, name)
        return done

    def _kill_quietly(self, who: Identity, job: str, user: str) -> None:
        with contextlib.suppress(NotFound, Conflict):  # it ended or went meanwhile
            self.jobs.kill(who, job, user=user)
