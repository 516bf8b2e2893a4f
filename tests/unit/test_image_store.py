"""Pulling and unpacking images on a machine (``backends/images.py``) against the real registries of
the test bed: by digest, once, with progress, with credentials that never reach a command line or
stay on disk, and each failure a clear problem."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from tests.registry_bed import Bed

from paddlecloud.backends.images import ImageError, ImageProblem, ImageStore, RegistryAuth
from paddlecloud.core.imageref import parse_image_ref

__all__: list[str] = []


def test_an_image_is_pulled_by_digest_and_unpacked_with_its_config(bed: Bed, tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "images")
    seen: list[tuple[int, int]] = []
    image = store.ensure(parse_image_ref(bed.image), progress=lambda done, total: seen.append((done, total)))
    assert image.digest.startswith("sha256:") and store.cached(parse_image_ref(bed.image), image.digest)
    assert (image.rootfs / "etc" / "paddlecloud-image").read_text().startswith("built for the PaddleCloud")
    assert (image.rootfs / "usr" / "bin" / "python3").exists()
    assert any(e.startswith("PATH=") for e in image.env) and image.working_dir == "/"
    total = seen[-1][1]
    assert total > 10 * 2**20 and seen[-1] == (total, total)  # the layers' bytes, done at the end
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)  # never backwards


def test_the_same_digest_is_pulled_once_however_many_ask(
    bed: Bed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ImageStore(tmp_path / "images")
    pulls: list[str] = []
    real = store._pull

    def counting(*args: object) -> None:
        pulls.append("pull")
        real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "_pull", counting)
    ref = parse_image_ref(bed.image)
    got: list[str] = []
    threads = [threading.Thread(target=lambda: got.append(store.ensure(ref).digest)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert len(got) == 3 and len(set(got)) == 1
    assert pulls == ["pull"]
    store.ensure(ref)  # cached: no pull at all
    assert pulls == ["pull"]


def test_a_private_image_needs_its_credentials_which_stay_nowhere(bed: Bed, tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "images")
    ref = parse_image_ref(bed.private_image)
    with pytest.raises(ImageError, match="paddlecloud image login") as err:
        store.ensure(ref)
    assert err.value.problem == ImageProblem.UNAUTHORIZED
    wrong = RegistryAuth(bed.private_registry, bed.user, "wrong-password")
    with pytest.raises(ImageError) as err:
        store.ensure(ref, wrong)
    assert err.value.problem == ImageProblem.UNAUTHORIZED
    auth = RegistryAuth(bed.private_registry, bed.user, bed.password)
    assert bed.password not in repr(auth)
    image = store.ensure(ref, auth)
    assert (image.rootfs / "etc" / "paddlecloud-image").exists()
    assert not list((tmp_path / "images").glob("auth-*"))  # the auth file went with the call
    leaked = [p for p in (tmp_path / "images").rglob("*") if p.is_file() and p.stat().st_size < 2**20
              and bed.password.encode() in p.read_bytes()]  # fmt: skip
    assert leaked == []


def test_a_missing_tag_and_a_dead_registry_are_said_as_such(bed: Bed, tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "images")
    with pytest.raises(ImageError, match="is not on") as err:
        store.ensure(parse_image_ref(f"{bed.registry}/paddlecloud-test/base:no-such-tag"))
    assert err.value.problem == ImageProblem.NOT_FOUND
    with pytest.raises(ImageError, match="cannot reach") as err:
        store.ensure(parse_image_ref("127.0.0.1:9/paddlecloud-test/base:2"))
    assert err.value.problem == ImageProblem.UNREACHABLE


def test_a_digest_the_registry_makes_up_never_becomes_a_path(tmp_path: Path) -> None:
    """A hostile registry's manifest list may name any "digest": it is checked before it is used."""
    from paddlecloud.backends import images

    ref = parse_image_ref("evil.example/x:1")
    for bad in ("/home/svc/.paddlecloud", "../../..", "sha256:" + "A" * 64, "sha256:abc", None, 7):
        with pytest.raises(ImageError) as err:
            images._digest(bad, ref)
        assert err.value.problem == ImageProblem.BAD_IMAGE
    store = ImageStore(tmp_path / "images")
    good = "sha256:" + "ab" * 32
    where = store._dir(ref, good)
    assert where.parent == tmp_path / "images" / "images" and good.split(":")[1] in where.name
    other = store._dir(parse_image_ref("evil.example/y:1"), good)
    assert other != where  # one repository's pulls are never another's cache


def test_loopback_means_a_loopback_address_not_a_name_that_starts_with_127() -> None:
    from paddlecloud.backends.images import _loopback

    assert _loopback("127.0.0.1:5000") and _loopback("localhost:5000") and _loopback("127.1.2.3")
    assert not _loopback("127.example.com") and not _loopback("registry.example:5000")


def test_pull_progress_is_said_every_few_seconds_once_at_the_end_and_not_without_a_size() -> None:
    from paddlecloud.backends.base import BackendEvent
    from paddlecloud.backends.local.image_prep import PullReporter

    now = [0.0]
    said: list[BackendEvent] = []
    report = PullReporter("r/x:1", said.append, every=3.0, clock=lambda: now[0])
    mib = 2**20
    for t, done in [(0, 0), (1, 10), (2, 20), (3.5, 30), (4, 40), (7, 100), (7.5, 100), (8, 100)]:
        now[0] = t
        report(done * mib, 100 * mib)
    assert [e.message for e in said] == [
        "Pulling r/x:1 (0 / 100 MiB)", "Pulling r/x:1 (30 / 100 MiB)", "Pulling r/x:1 (100 / 100 MiB)",
    ]  # fmt: skip
    quiet: list[BackendEvent] = []
    unknown = PullReporter("r/x:1", quiet.append)
    unknown(0, 0)
    unknown(5 * mib, 0)  # a manifest list's pull: no size, no flood of "0 / 0 MiB"
    assert quiet == []


def test_images_past_the_cap_are_evicted_least_recently_used_never_one_in_use(
    bed: Bed, tmp_path: Path
) -> None:
    """A cap of 1 byte: two images both held by jobs stay (the store is over its cap); once both
    are released, using one again evicts the other; a pull that fails holds nothing."""
    store = ImageStore(tmp_path / "store", max_bytes=1)
    auth = RegistryAuth(bed.private_registry, bed.user, bed.password)
    first = store.ensure(parse_image_ref(bed.image), holder="alice/one")
    second = store.ensure(parse_image_ref(bed.private_image), auth, holder="bob/two")
    assert first.rootfs != second.rootfs  # one folder per (repository, digest)
    assert first.rootfs.is_dir() and second.rootfs.is_dir()  # both in use: none evicted
    store.release(first.rootfs, "alice/one")
    store.release(second.rootfs, "bob/two")
    again = store.ensure(parse_image_ref(bed.image), holder="alice/three")  # cached: no pull
    assert again.rootfs == first.rootfs and (again.rootfs / "etc" / "paddlecloud-image").is_file()
    assert not second.rootfs.exists()  # the least recently used one no job holds
    with pytest.raises(ImageError):
        store.ensure(parse_image_ref(bed.private_image), None, holder="carol/denied")
    assert not list((tmp_path / "store" / "images").glob("*.pins/carol:denied"))
