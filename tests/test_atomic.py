"""pipelines.atomic: a file is replaced whole or left as it was; temporary files are unique and cleaned."""

import os
import stat

import pytest

from pipelines import atomic


def test_write_replaces_the_file_with_the_usual_mode_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "report.md"
    atomic.write_text(path, "first")
    atomic.write_json(tmp_path / "m.json", {"a": 1})
    atomic.write_text(path, "second")
    assert path.read_text(encoding="utf-8") == "second"
    assert (tmp_path / "m.json").read_text() == '{\n  "a": 1\n}\n'
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.md"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path):
    path = tmp_path / "plot.png"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic.atomic_write(path, "wb") as f:
            f.write(b"half a pl")
            raise RuntimeError("savefig failed")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def test_two_writers_of_one_file_get_their_own_temporary(tmp_path):
    path = tmp_path / "metrics.json"
    with atomic.atomic_write(path) as first, atomic.atomic_write(path) as second:
        temporaries = sorted(p.name for p in tmp_path.iterdir())  # one shared `metrics.tmp` let two runs mix
        assert len(temporaries) == 2 and all(n.startswith(".metrics.json.") for n in temporaries)
        first.write("{}")
        second.write("[]")
    assert path.read_text() == "{}"  # the last rename wins, whole


def test_only_whole_file_modes(tmp_path):
    with pytest.raises(ValueError, match="mode 'w' or 'wb'"):
        with atomic.atomic_write(tmp_path / "x", "a"):
            pass
