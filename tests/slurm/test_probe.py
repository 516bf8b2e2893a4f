"""The start-up check that the Slurm nodes see the backend's shared directory (``slurm.probe``),
against the real cluster: every node reads the token back; a file that is not there on a node is
told apart from a node that cannot be asked (issue 25: a data dir the nodes could not see was
accepted, and every worker vanished without an exit status)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddlecloud.backends.registry import BackendConfigError
from paddlecloud.backends.slurm import SlurmSettings, probe

pytestmark = pytest.mark.timeout(120)
NODES = ("n1", "n2", "n3")


def test_every_node_sees_a_shared_directory(slurm: dict[str, str], tmp_path: Path) -> None:
    found = probe.shared_dir_seen(tmp_path / "root", NODES)
    assert (found.seen, found.unseen, found.unknown) == (NODES, {}, {})
    assert not (tmp_path / "root" / "probe").exists()  # the token goes with the probe
    probe.check_shared_dir(SlurmSettings(root=tmp_path / "root"))  # no error


def test_a_file_a_node_does_not_have_is_unseen_and_a_node_slurm_lacks_unknown(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    node, verdict, said = probe._ask("n2", tmp_path / "not-on-the-node", "x", ())
    assert (node, verdict) == ("n2", "unseen") and "cat: " in said and "No such file" in said, said
    node, verdict, said = probe._ask("no-such-node", tmp_path / "t", "x", ())
    assert verdict == "unknown" and said, said  # Slurm's own words: never taken for "unseen"


def test_unseen_nodes_refuse_the_backend_naming_them(
    slurm: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unseen(root: Path, nodes: object, extra: object = ()) -> probe.Probe:
        return probe.Probe(("n1",), {"n2": "cat: x: No such file or directory"})

    monkeypatch.setattr(probe, "shared_dir_seen", unseen)
    with pytest.raises(BackendConfigError, match=r"Slurm node n2 cannot see .*--data-dir"):
        probe.check_shared_dir(SlurmSettings(root=tmp_path))
