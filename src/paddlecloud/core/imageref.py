"""Container image references: ``REGISTRY/REPOSITORY[:TAG][@DIGEST]``, read the way Docker, skopeo
and the OCI distribution spec read them, parsed once into an :class:`ImageRef`.

    "127.0.0.1:5000/team/train:1"       registry 127.0.0.1:5000, repository team/train, tag 1
    "registry.example/train@sha256:…"    pinned by digest (a tag may stand beside it)
    "registry.example/train"            tag ``latest``

Grammar (distribution/reference): the registry is a host name or an IPv4 address, with an optional
port; the repository is one or more path components of lower-case letters and digits joined by
``.``, ``_``, ``__`` or dashes, at most 255 characters; a tag is 1-128 of ``[A-Za-z0-9_.-]``, not
starting with ``.`` or ``-``; a digest is ``sha256:`` + 64 or ``sha512:`` + 128 lower-case hex
digits. Unlike Docker, a reference must name its registry: the platform has no default one (no
public registry is reachable from a cluster's nodes as a rule, and a silent default would pull from
somewhere the user did not choose). :func:`parse_image_ref` raises :class:`ImageRefError` with what
to change; ``str(ref)`` is the canonical form the platform stores.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MAX_IMAGE_REF_CHARS", "ImageRef", "ImageRefError", "parse_image_ref"]

#: the longest reference accepted (a 255-character repository, a registry, a tag and a digest fit)
MAX_IMAGE_REF_CHARS = 512

_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_REGISTRY = re.compile(rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]{{1,5}})?")
_PATH_PART = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}")
_MAX_REPOSITORY = 255


class ImageRefError(ValueError):
    """A reference that does not parse; the message says what to change."""


@dataclass(frozen=True)
class ImageRef:
    registry: str
    repository: str
    #: ``latest`` when the reference named neither a tag nor a digest
    tag: str | None = "latest"
    digest: str | None = None

    def __str__(self) -> str:
        out = f"{self.registry}/{self.repository}"
        if self.tag is not None:
            out += f":{self.tag}"
        if self.digest is not None:
            out += f"@{self.digest}"
        return out

    @property
    def name(self) -> str:
        """``REGISTRY/REPOSITORY``: what credentials and pulls are keyed by."""
        return f"{self.registry}/{self.repository}"


def _looks_like_registry(first: str) -> bool:
    return "." in first or ":" in first or first == "localhost"


def parse_image_ref(text: str) -> ImageRef:
    """``text`` as an :class:`ImageRef` (see the module's grammar)."""
    if not text or len(text) > MAX_IMAGE_REF_CHARS:
        raise ImageRefError(f"an image reference has 1 to {MAX_IMAGE_REF_CHARS} characters")
    if any(c.isspace() for c in text) or not text.isprintable():
        raise ImageRefError("an image reference has no spaces or control characters")
    rest, _, digest = text.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        raise ImageRefError(f"digest {digest!r}: expected sha256: and 64 lower-case hex digits")
    first, slash, path = rest.partition("/")
    if not slash or not _looks_like_registry(first):
        raise ImageRefError(
            f"{text!r} names no registry: give it as REGISTRY/REPOSITORY[:TAG] "
            "(for example 127.0.0.1:5000/train:1); the platform has no default registry"
        )
    if not _REGISTRY.fullmatch(first):
        raise ImageRefError(f"registry {first!r}: a host name or IPv4 address, with an optional :PORT")
    repository, colon, tag = path.rpartition(":") if ":" in path else (path, "", "")
    if colon and not _TAG.fullmatch(tag):
        raise ImageRefError(f"tag {tag!r}: 1-128 of letters, digits, _ . - (not starting with . or -)")
    if not repository or len(repository) > _MAX_REPOSITORY:
        raise ImageRefError(f"the repository has 1 to {_MAX_REPOSITORY} characters")
    for part in repository.split("/"):
        if not _PATH_PART.fullmatch(part):
            raise ImageRefError(
                f"repository part {part!r}: lower-case letters and digits, joined by . _ __ or -"
            )
    return ImageRef(
        registry=first,
        repository=repository,
        tag=tag if colon else (None if digest else "latest"),
        digest=digest or None,
    )
