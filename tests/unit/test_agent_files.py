"""The sandbox file API's pure module (mezzo.agent.files) on real temporary directories."""

from __future__ import annotations

import json
import os
import stat

import pytest

from mezzo.agent.files import (
    BROWSE_MAX,
    DOWNLOAD_CHUNK,
    READ_MAX,
    BadRequest,
    Forbidden,
    NotFound,
    SandboxFiles,
    answer,
)
from mezzo.agent.sandbox import Sandbox

FID, EID = "fw-1", "task-1"
RUN = f"/frameworks/{FID}/executors/{EID}/runs"


@pytest.fixture
def work(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "meta").mkdir()
    (work / "meta" / "journal").write_text("secret journal")
    for cid in ("c-old", "c-new"):
        sandbox = Sandbox.create(str(work), FID, EID, cid)
        with open(os.path.join(sandbox.path, "stdout"), "w") as f:
            f.write(f"hello from {cid}\n")
        open(os.path.join(sandbox.path, "stderr"), "w").close()
    os.utime(Sandbox.path_for(str(work), FID, EID, "c-old"), (1, 1))
    return work


def test_read_gives_the_bytes_from_an_offset_and_minus_one_gives_the_size(work) -> None:
    files = SandboxFiles(str(work))
    assert files.read(f"{RUN}/c-new/stdout") == {"offset": 0, "data": "hello from c-new\n", "length": 17}
    assert files.read(f"{RUN}/c-new/stdout", 6, 4) == {"offset": 6, "data": "from", "length": 4}
    assert files.read(f"{RUN}/c-new/stdout", -1) == {"offset": 17, "data": "", "length": 0}
    assert files.read(f"{RUN}/c-new/stdout", 100) == {"offset": 100, "data": "", "length": 0}


def test_the_real_path_works_as_the_virtual_one(work) -> None:
    files = SandboxFiles(str(work))
    real = Sandbox.path_for(str(work), FID, EID, "c-old") + "/stdout"
    assert files.read(real)["data"] == "hello from c-old\n"


def test_latest_is_the_run_the_agent_holds_else_the_newest_on_disk(work) -> None:
    assert SandboxFiles(str(work)).read(f"{RUN}/latest/stdout")["data"] == "hello from c-new\n"
    held = SandboxFiles(str(work), latest=lambda fid, eid: "c-old" if (fid, eid) == (FID, EID) else None)
    assert held.read(f"{RUN}/latest/stdout")["data"] == "hello from c-old\n"
    with pytest.raises(NotFound):
        SandboxFiles(str(work)).read(f"/frameworks/{FID}/executors/nope/runs/latest/stdout")


def test_a_read_is_capped_at_64_kib_and_bytes_that_are_not_utf8_are_replaced(work) -> None:
    path = Sandbox.path_for(str(work), FID, EID, "c-new") + "/big"
    with open(path, "wb") as f:
        f.write(b"\xff" + b"x" * (3 * READ_MAX))
    files = SandboxFiles(str(work))
    got = files.read(f"{RUN}/c-new/big")
    assert got["data"][0] == "\ufffd" and len(got["data"]) == READ_MAX
    assert len(files.read(f"{RUN}/c-new/big", 0, 10 * READ_MAX)["data"]) == READ_MAX
    assert len(files.read_bytes(f"{RUN}/c-new/big", 0, None, cap=DOWNLOAD_CHUNK)[1]) == 3 * READ_MAX + 1


def test_browse_lists_entries_like_mesos_file_info(work) -> None:
    files = SandboxFiles(str(work))
    listing = files.browse(f"{RUN}/c-new")
    assert [e["path"] for e in listing] == [f"{RUN}/c-new/stderr", f"{RUN}/c-new/stdout"]
    out = listing[1]
    assert out["size"] == 17 and out["nlink"] == 1 and out["mode"].startswith("-rw")
    assert isinstance(out["mtime"], int) and out["uid"] and out["gid"] is not None
    assert files.browse(f"{RUN}/c-new/stdout") == [out]  # a file: itself
    os.mkdir(Sandbox.path_for(str(work), FID, EID, "c-new") + "/tasks", 0o750)
    (entry,) = [e for e in files.browse(f"{RUN}/c-new/") if e["path"].endswith("tasks")]
    assert entry["mode"][0] == "d" and entry["path"] == f"{RUN}/c-new/tasks"
    assert files.browse(f"{RUN}/c-new/tasks") == []


def test_browse_is_bounded(work, monkeypatch) -> None:
    import mezzo.agent.files as module

    monkeypatch.setattr(module, "BROWSE_MAX", 3)
    sandbox = Sandbox.path_for(str(work), FID, EID, "c-new")
    for i in range(10):
        open(os.path.join(sandbox, f"f{i}"), "w").close()
    assert len(SandboxFiles(str(work)).browse(f"{RUN}/c-new")) == 3
    assert BROWSE_MAX >= 1000


def test_symlinks_are_refused_wherever_they_are(work, tmp_path) -> None:
    sandbox = Sandbox.path_for(str(work), FID, EID, "c-new")
    os.symlink("/etc/passwd", os.path.join(sandbox, "stdout2"))
    os.symlink(str(work / "meta"), os.path.join(sandbox, "meta"))
    os.symlink(sandbox, Sandbox.path_for(str(work), FID, EID, "c-link"))
    files = SandboxFiles(str(work))
    for path in (f"{RUN}/c-new/stdout2", f"{RUN}/c-new/meta/journal", f"{RUN}/c-link/stdout"):
        with pytest.raises(Forbidden, match="symlink"):
            files.read(path)
    with pytest.raises(Forbidden):
        files.browse(f"{RUN}/c-new/meta")
    # Listed, not followed.
    (link,) = [e for e in files.browse(f"{RUN}/c-new") if e["path"].endswith("stdout2")]
    assert link["mode"].startswith("l")


def test_paths_outside_the_sandboxes_and_dot_dot_are_refused(work) -> None:
    files = SandboxFiles(str(work))
    for path in (
        "/etc/passwd",
        f"{work}/meta/journal",
        "/meta/journal",
        f"{RUN}/c-new/../../../../../meta/journal",
        f"/frameworks/{FID}/executors/{EID}",
        "relative/path",
    ):
        with pytest.raises(Forbidden):
            files.read(path)


def test_missing_directories_and_bad_parameters(work) -> None:
    files = SandboxFiles(str(work))
    with pytest.raises(NotFound):
        files.read(f"{RUN}/c-new/nothing")
    with pytest.raises(NotFound):
        files.read(f"{RUN}/c-new/stdout/below")
    with pytest.raises(BadRequest, match="directory"):
        files.read(f"{RUN}/c-new")
    with pytest.raises(BadRequest, match="'offset'"):
        files.read(f"{RUN}/c-new/stdout", -5)
    with pytest.raises(BadRequest, match="'length'"):
        files.read(f"{RUN}/c-new/stdout", 0, -7)
    with pytest.raises(BadRequest, match="'path'"):
        files.read("")


def test_fifos_are_refused_without_blocking(work) -> None:
    sandbox = Sandbox.path_for(str(work), FID, EID, "c-new")
    os.mkfifo(os.path.join(sandbox, "pipe"))
    with pytest.raises(Forbidden, match="neither a regular file"):
        SandboxFiles(str(work)).read(f"{RUN}/c-new/pipe")
    assert stat.S_ISFIFO(os.lstat(os.path.join(sandbox, "pipe")).st_mode)


def test_answer_speaks_status_and_json_or_raw_bytes(work) -> None:
    files = SandboxFiles(str(work))
    assert answer(files, "read", f"{RUN}/c-new/stdout", -1, -1) == (200, b'{"offset":17,"data":"","length":0}')
    assert answer(files, "download", f"{RUN}/c-new/stdout", 6, 4) == (200, b"from")
    status, body = answer(files, "browse", "/etc", 0, -1)
    assert status == 403 and json.loads(body)["status"] == 403
    status, body = answer(files, "read", f"{RUN}/c-new/none", 0, -1)
    assert status == 404
    status, body = answer(files, "erase", f"{RUN}/c-new/stdout", 0, -1)
    assert status == 400 and "'operation'" in json.loads(body)["error"]


def test_a_character_cut_at_a_pages_end_is_left_for_the_next_page_and_length_counts_bytes(work) -> None:
    path = Sandbox.path_for(str(work), FID, EID, "c-new") + "/utf8"
    text = "aé€😀"  # 1, 2, 3 and 4 bytes
    with open(path, "wb") as f:
        f.write(text.encode() + b"\xff!")
    files = SandboxFiles(str(work))
    name = f"{RUN}/c-new/utf8"
    pages, offset = [], 0
    while True:
        got = files.read(name, offset, 4)
        if not got["length"]:
            break
        pages.append(got["data"])
        offset += got["length"]
    # Every character whole, on the page where it could be; the stray byte replaced.
    assert "".join(pages) == text + "\ufffd!"
    assert offset == len(text.encode()) + 2
    assert files.read(name, 0, 2) == {"offset": 0, "data": "a", "length": 1}
    assert files.read(name, 3, 3) == {"offset": 3, "data": "€", "length": 3}
    # A page too short for the character it starts: given as it is, so a reader moves on.
    assert files.read(name, 3, 2) == {"offset": 3, "data": "\ufffd", "length": 2}
    # The end of a growing file holding only a character's first bytes: nothing new yet.
    with open(path, "wb") as f:
        f.write("a€".encode()[:3])
    assert files.read(name, 1, 64) == {"offset": 1, "data": "", "length": 0}
    assert files.read(name, 0, 64) == {"offset": 0, "data": "a", "length": 1}
