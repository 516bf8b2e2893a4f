"""PFS paths: ``/pfs/<datacenter>/home/<user>/...`` and ``/pfs/<datacenter>/public/...``.

Parsing is strict and happens before any storage is touched: a path is split on ``/`` and every
component checked; ``.`` and ``..``, NUL and other control characters, over-long components and
paths are refused rather than normalised, so nothing can name a place outside its area. The CLI's
short form ``pfs:REL`` means ``/pfs/<current dc>/home/<me>/REL``.

Access rules (``can_read`` / ``can_write``): a user reads and writes their own home and reads public;
admins read and write everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from paddlecloud.core.names import check_dns1123_label

__all__ = [
    "MAX_COMPONENT_BYTES",
    "MAX_PATH_BYTES",
    "PfsPath",
    "PfsPathError",
    "expand_short",
    "is_remote",
    "parse_pfs_path",
]

MAX_COMPONENT_BYTES = 255
MAX_PATH_BYTES = 4096
PREFIX = "/pfs/"
SHORT = "pfs:"


class PfsPathError(ValueError):
    """A PFS path that is malformed or names something outside the namespace."""


@dataclass(frozen=True)
class PfsPath:
    datacenter: str
    area: str  # "home" | "public"
    owner: str | None  # the user whose home this is; None for public
    parts: tuple[str, ...] = ()  # below the area root

    @classmethod
    def from_key(cls, datacenter: str, key: tuple[str, ...]) -> PfsPath:
        """Inverse of :attr:`key`."""
        if key[:1] == ("home",) and len(key) >= 2:
            return cls(datacenter, "home", key[1], tuple(key[2:]))
        if key[:1] == ("public",):
            return cls(datacenter, "public", None, tuple(key[1:]))
        raise PfsPathError(f"not a storage key: {key!r}")

    @property
    def root_parts(self) -> tuple[str, ...]:
        return ("home", self.owner) if self.area == "home" and self.owner else ("public",)

    @property
    def key(self) -> tuple[str, ...]:
        """Storage key: area root + parts, e.g. ``("home", "alice", "data", "x")``."""
        return (*self.root_parts, *self.parts)

    @property
    def name(self) -> str:
        return self.parts[-1] if self.parts else self.root_parts[-1]

    @property
    def is_root(self) -> bool:
        return not self.parts

    def child(self, *names: str) -> PfsPath:
        for n in names:
            _check_component(n)
        return PfsPath(self.datacenter, self.area, self.owner, (*self.parts, *names))

    def parent(self) -> PfsPath:
        if not self.parts:
            raise PfsPathError(f"{self} has no parent inside its area")
        return PfsPath(self.datacenter, self.area, self.owner, self.parts[:-1])

    def can_read(self, user: str, is_admin: bool) -> bool:
        return is_admin or self.area == "public" or self.owner == user

    def can_write(self, user: str, is_admin: bool) -> bool:
        return is_admin or (self.area == "home" and self.owner == user)

    def __str__(self) -> str:
        return PREFIX + "/".join((self.datacenter, *self.root_parts, *self.parts))


def _check_component(c: str) -> None:
    if c in ("", ".", ".."):
        raise PfsPathError(f"path component {c!r} is not allowed (no empty, '.' or '..' components)")
    if any(ord(ch) < 0x20 or ch == "\x7f" for ch in c):
        raise PfsPathError("path contains a control character (NUL, newline, ...)")
    if len(c.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES:
        raise PfsPathError(f"path component is longer than {MAX_COMPONENT_BYTES} bytes")


def is_remote(text: str) -> bool:
    return text.startswith(PREFIX) or text.startswith(SHORT)


def expand_short(text: str, datacenter: str, user: str) -> str:
    """``pfs:data/x`` → ``/pfs/<dc>/home/<user>/data/x``; other text is returned as is."""
    if not text.startswith(SHORT):
        return text
    rel = text[len(SHORT) :].strip("/")
    return f"{PREFIX}{datacenter}/home/{user}" + (f"/{rel}" if rel else "")


def parse_pfs_path(text: str, datacenter: str | None = None) -> PfsPath:
    """Parse and validate; ``datacenter``, when given, must be the one named in the path."""
    if "\x00" in text:
        raise PfsPathError("path contains a NUL byte")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise PfsPathError(f"path is longer than {MAX_PATH_BYTES} bytes")
    if not text.startswith(PREFIX):
        raise PfsPathError(f"{text!r} is not a PFS path: write /pfs/<datacenter>/home/<user>/... or pfs:REL")
    parts = text[len(PREFIX) :].rstrip("/").split("/")
    for p in parts:
        _check_component(p)
    if len(parts) < 2:
        raise PfsPathError(
            f"{text!r}: expected /pfs/<datacenter>/home/<user>/... or /pfs/<datacenter>/public/..."
        )
    dc, area, rest = parts[0], parts[1], parts[2:]
    if datacenter is not None and dc != datacenter:
        raise PfsPathError(f"{text!r} names datacenter {dc!r}, but this is {datacenter!r}")
    if area == "public":
        return PfsPath(dc, "public", None, tuple(rest))
    if area == "home":
        if not rest:
            raise PfsPathError(f"{text!r}: name a user's home, /pfs/{dc}/home/<user>")
        try:
            check_dns1123_label(rest[0])
        except ValueError as exc:
            raise PfsPathError(f"{rest[0]!r} is not a user name: {exc}") from None
        return PfsPath(dc, "home", rest[0], tuple(rest[1:]))
    raise PfsPathError(f"{text!r}: the areas under /pfs/{dc}/ are home/<user> and public")
