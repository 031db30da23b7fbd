"""Directories made and removed by child processes (storage.classic.directories)."""

from __future__ import annotations

import asyncio
import logging

from storage.classic import directories
from storage.classic.checkpoint import move_aside_for_deletion
from storage.classic.directories import Trash, make_log_dirs


async def test_directories_deleted_one_after_another_are_removed_together(tmp_path,
                                                                          monkeypatch):
    children: list[list[str]] = []
    remove_all = directories.remove_trees

    def counted(paths: list[str]) -> None:
        children.append(paths)
        remove_all(paths)

    monkeypatch.setattr(directories, "remove_trees", counted)
    monkeypatch.setattr(directories, "REMOVAL_COLLECT_S", 1.0)  # not the renames' pace here
    for i in range(200):
        (tmp_path / f"t-{i}" / "sub").mkdir(parents=True)
        (tmp_path / f"t-{i}" / "sub" / "00000000000000000000.log").write_bytes(b"x" * 100)
    trash = Trash()
    for i in range(200):
        trash.add(move_aside_for_deletion(tmp_path / f"t-{i}"))
        await asyncio.sleep(0)  # one a turn, as a topic's deletion goes
    await trash.emptied()
    assert list(tmp_path.iterdir()) == []
    assert len(children) == 1 and len(children[0]) == 200


async def test_a_directory_that_cannot_be_made_is_logged_and_the_others_are_made(tmp_path,
                                                                                 caplog):
    paths = [str(tmp_path / "a-0"), str(tmp_path / "missing" / "b-0"), str(tmp_path / "c-0")]
    with caplog.at_level(logging.WARNING, logger=directories.__name__):
        await asyncio.to_thread(make_log_dirs, paths)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-0", "c-0"]
    assert [p.name for p in (tmp_path / "c-0").iterdir()] == [f"{0:020d}.log"]
    [record] = caplog.records
    assert "missing/b-0" in record.getMessage()


async def test_a_child_that_cannot_start_is_logged(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(directories.sys, "executable", str(tmp_path / "no-python"))
    with caplog.at_level(logging.WARNING, logger=directories.__name__):
        await asyncio.to_thread(make_log_dirs, [str(tmp_path / "a-0")])
    assert not (tmp_path / "a-0").exists()
    [record] = caplog.records
    assert "no-python" in record.getMessage()
