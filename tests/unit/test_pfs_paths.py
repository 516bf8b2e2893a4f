"""core.pfspath: parsing /pfs/<dc>/home/<user>/... and /pfs/<dc>/public/..., the ``pfs:REL`` short
form, storage keys and the access rules. Pure functions: every case is one table row."""

from __future__ import annotations

import re

import pytest

from paddlecloud.core.pfspath import (
    MAX_COMPONENT_BYTES,
    MAX_PATH_BYTES,
    PfsPath,
    PfsPathError,
    expand_short,
    is_remote,
    parse_pfs_path,
)

pytestmark = pytest.mark.timeout(30)

DC = "local"


# -- parse_pfs_path: accepted --------------------------------------------------------------------

ACCEPTED = [
    # text, (datacenter, area, owner, parts)
    ("/pfs/local/home/alice", ("local", "home", "alice", ())),
    ("/pfs/local/home/alice/", ("local", "home", "alice", ())),
    ("/pfs/local/home/alice///", ("local", "home", "alice", ())),
    ("/pfs/local/home/alice/data", ("local", "home", "alice", ("data",))),
    ("/pfs/local/home/alice/data/x.csv", ("local", "home", "alice", ("data", "x.csv"))),
    ("/pfs/local/home/a-1/d", ("local", "home", "a-1", ("d",))),
    ("/pfs/local/public", ("local", "public", None, ())),
    ("/pfs/local/public/", ("local", "public", None, ())),
    ("/pfs/local/public/mnist/train.gz", ("local", "public", None, ("mnist", "train.gz"))),
    ("/pfs/other-dc/home/bob/x", ("other-dc", "home", "bob", ("x",))),
    # names that merely look odd are literal names, not syntax
    ("/pfs/local/home/alice/...", ("local", "home", "alice", ("...",))),
    ("/pfs/local/home/alice/.hidden", ("local", "home", "alice", (".hidden",))),
    ("/pfs/local/home/alice/..x", ("local", "home", "alice", ("..x",))),
    ("/pfs/local/home/alice/%2e%2e", ("local", "home", "alice", ("%2e%2e",))),
    ("/pfs/local/home/alice/a\\..\\b", ("local", "home", "alice", ("a\\..\\b",))),
    ("/pfs/local/home/alice/\uff0e\uff0e", ("local", "home", "alice", ("\uff0e\uff0e",))),
    ("/pfs/local/home/alice/\u2024\u2024", ("local", "home", "alice", ("\u2024\u2024",))),
    ("/pfs/local/home/alice/sp ace", ("local", "home", "alice", ("sp ace",))),
    ("/pfs/local/home/alice/" + "a" * MAX_COMPONENT_BYTES, ("local", "home", "alice", ("a" * 255,))),
    # 255 bytes of UTF-8 (85 three-byte characters) is the limit, not 255 characters
    ("/pfs/local/home/alice/" + "\u20ac" * 85, ("local", "home", "alice", ("\u20ac" * 85,))),
]


@pytest.mark.parametrize(("text", "want"), ACCEPTED)
def test_parse_accepts(text: str, want: tuple[str, str, str | None, tuple[str, ...]]) -> None:
    p = parse_pfs_path(text)
    assert (p.datacenter, p.area, p.owner, p.parts) == want


@pytest.mark.parametrize(("text", "want"), ACCEPTED)
def test_parse_with_matching_datacenter(
    text: str, want: tuple[str, str, str | None, tuple[str, ...]]
) -> None:
    if want[0] != DC:
        with pytest.raises(PfsPathError, match="names datacenter"):
            parse_pfs_path(text, DC)
    else:
        assert parse_pfs_path(text, DC) == parse_pfs_path(text)


def test_path_of_exactly_the_maximum_length_is_accepted() -> None:
    head = "/pfs/local/home/alice"
    parts = []
    while len(head) + sum(len(p) + 1 for p in parts) + 201 <= MAX_PATH_BYTES:
        parts.append("d" * 200)
    rest = MAX_PATH_BYTES - len(head) - sum(len(p) + 1 for p in parts) - 1
    parts.append("f" * rest)
    text = head + "/" + "/".join(parts)
    assert len(text.encode()) == MAX_PATH_BYTES
    assert parse_pfs_path(text).parts == tuple(parts)
    with pytest.raises(PfsPathError, match="longer than"):
        parse_pfs_path(text + "f")


# -- parse_pfs_path: refused ---------------------------------------------------------------------

REFUSED = [
    # text, a word the message must contain
    ("", "not a PFS path"),
    ("/", "not a PFS path"),
    ("pfs:data", "not a PFS path"),  # short form must be expanded first
    ("/etc/passwd", "not a PFS path"),
    ("/pfs", "not a PFS path"),
    ("pfs/local/home/alice", "not a PFS path"),
    ("//pfs/local/home/alice", "not a PFS path"),
    ("/PFS/local/home/alice", "not a PFS path"),
    ("/pfs/", "component"),
    ("/pfs/local", "expected"),
    ("/pfs/local/", "expected"),
    ("/pfs/local/home", "name a user's home"),
    ("/pfs/local/home/", "name a user's home"),
    ("/pfs/local/private/x", "areas"),
    ("/pfs/local/Home/alice", "areas"),
    ("/pfs/local/home/Alice", "not a user name"),
    ("/pfs/local/home/al_ice", "not a user name"),
    ("/pfs/local/home/-alice", "not a user name"),
    ("/pfs/local/home/" + "a" * 64, "not a user name"),
    # traversal and empty components are refused, never normalised
    ("/pfs/local/home/alice/..", "'..'"),
    ("/pfs/local/home/alice/../bob", "'..'"),
    ("/pfs/local/home/alice/data/../../bob/x", "'..'"),
    ("/pfs/local/home/../../etc/passwd", "'..'"),
    ("/pfs/../etc/passwd", "'..'"),
    ("/pfs/local/public/../home/bob", "'..'"),
    ("/pfs/local/home/alice/.", "'.'"),
    ("/pfs/local/home/alice/./x", "'.'"),
    ("/pfs/local/home/alice//x", "empty"),
    ("/pfs//local/home/alice", "empty"),
    # control characters
    ("/pfs/local/home/alice/a\x00b", "NUL"),
    ("/pfs/local/home/alice/a\nb", "control"),
    ("/pfs/local/home/alice/a\rb", "control"),
    ("/pfs/local/home/alice/a\tb", "control"),
    ("/pfs/local/home/alice/a\x1bb", "control"),
    ("/pfs/local/home/alice/a\x7fb", "control"),
    # lengths
    ("/pfs/local/home/alice/" + "a" * (MAX_COMPONENT_BYTES + 1), "longer than 255"),
    ("/pfs/local/home/alice/" + "\u20ac" * 86, "longer than 255"),
    ("/pfs/local/home/alice/" + "/".join(["d" * 100] * 50), "longer than 4096"),
]


@pytest.mark.parametrize(("text", "match"), REFUSED)
def test_parse_refuses(text: str, match: str) -> None:
    with pytest.raises(PfsPathError, match=re.escape(match)):
        parse_pfs_path(text)


def test_pfs_path_error_is_a_value_error() -> None:
    assert issubclass(PfsPathError, ValueError)


# -- pfs:REL and is_remote -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("pfs:", "/pfs/local/home/alice"),
        ("pfs:/", "/pfs/local/home/alice"),
        ("pfs:data", "/pfs/local/home/alice/data"),
        ("pfs:data/", "/pfs/local/home/alice/data"),
        ("pfs:/data/x.csv", "/pfs/local/home/alice/data/x.csv"),
        ("pfs:data/*.csv", "/pfs/local/home/alice/data/*.csv"),
        # not short: returned as given
        ("/pfs/local/public/x", "/pfs/local/public/x"),
        ("data/x", "data/x"),
        ("./pfs:x", "./pfs:x"),
        ("PFS:x", "PFS:x"),
    ],
)
def test_expand_short(text: str, want: str) -> None:
    assert expand_short(text, DC, "alice") == want


@pytest.mark.parametrize(
    "text",
    ["pfs:../x", "pfs:../../bob", "pfs:data/../../bob", "pfs:./x", "pfs:a//b", "pfs:a\x00b", "pfs:a\nb"],
)
def test_short_form_cannot_escape_the_home(text: str) -> None:
    """Expansion is textual; the strict parse that follows refuses what would leave the home."""
    expanded = expand_short(text, DC, "alice")
    assert expanded.startswith("/pfs/local/home/alice")
    with pytest.raises(PfsPathError):
        parse_pfs_path(expanded, DC)


@pytest.mark.parametrize(
    ("text", "remote"),
    [
        ("pfs:", True),
        ("pfs:x", True),
        ("/pfs/local/home/alice", True),
        ("/pfs/", True),
        ("/pfs", False),
        ("/pfsdata/x", False),
        ("pfs", False),
        ("./pfs:x", False),
        ("data/x", False),
        ("/home/alice/pfs:x", False),
        ("", False),
        ("PFS:x", False),
    ],
)
def test_is_remote(text: str, remote: bool) -> None:
    assert is_remote(text) is remote


# -- keys ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("/pfs/local/home/alice", ("home", "alice")),
        ("/pfs/local/home/alice/a/b", ("home", "alice", "a", "b")),
        ("/pfs/local/public", ("public",)),
        ("/pfs/local/public/a", ("public", "a")),
    ],
)
def test_key_round_trip(text: str, key: tuple[str, ...]) -> None:
    p = parse_pfs_path(text, DC)
    assert p.key == key
    assert PfsPath.from_key(DC, key) == p
    assert str(p) == text
    assert str(PfsPath.from_key(DC, key)) == text


@pytest.mark.parametrize("key", [(), ("home",), ("private", "x"), ("etc", "passwd"), ("homes", "alice")])
def test_from_key_refuses_non_keys(key: tuple[str, ...]) -> None:
    with pytest.raises(PfsPathError, match="not a storage key"):
        PfsPath.from_key(DC, key)


def test_name_parent_child_is_root() -> None:
    home = parse_pfs_path("/pfs/local/home/alice")
    assert home.is_root and home.name == "alice"
    f = home.child("data", "x.csv")
    assert not f.is_root and f.name == "x.csv"
    assert f.parent() == home.child("data")
    assert f.parent().parent() == home
    with pytest.raises(PfsPathError, match="no parent"):
        home.parent()
    pub = parse_pfs_path("/pfs/local/public")
    assert pub.name == "public" and pub.is_root


@pytest.mark.parametrize("bad", ["..", ".", "", "a\x00", "x\n", "a" * 256])
def test_child_checks_components(bad: str) -> None:
    with pytest.raises(PfsPathError):
        parse_pfs_path("/pfs/local/home/alice").child(bad)


# -- access rules --------------------------------------------------------------------------------

ALICE_HOME = "/pfs/local/home/alice/x"
BOB_HOME = "/pfs/local/home/bob/x"
PUBLIC = "/pfs/local/public/x"

ACCESS = [
    # path, user, is_admin, can_read, can_write
    (ALICE_HOME, "alice", False, True, True),
    ("/pfs/local/home/alice", "alice", False, True, True),
    (ALICE_HOME, "bob", False, False, False),
    ("/pfs/local/home/alice", "bob", False, False, False),
    (BOB_HOME, "alice", False, False, False),
    (PUBLIC, "alice", False, True, False),
    ("/pfs/local/public", "bob", False, True, False),
    (ALICE_HOME, "root", True, True, True),
    (BOB_HOME, "root", True, True, True),
    (PUBLIC, "root", True, True, True),
    # a user named like the area does not own it
    (PUBLIC, "public", False, True, False),
    ("/pfs/local/home/alice-2/x", "alice", False, False, False),
    ("/pfs/local/home/alic/x", "alice", False, False, False),
]


@pytest.mark.parametrize(("text", "user", "admin", "read", "write"), ACCESS)
def test_access(text: str, user: str, admin: bool, read: bool, write: bool) -> None:
    p = parse_pfs_path(text, DC)
    assert p.can_read(user, admin) is read
    assert p.can_write(user, admin) is write
