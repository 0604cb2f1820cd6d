"""The on-disk cache of tuned GEMM choices (kronlinalg._gemm_cache): round trips between
processes, merging with another process's writes, and files that cannot be read or written."""

from __future__ import annotations

import json
import os

import pytest

from kronlinalg.vendor import gemm_cache


@pytest.fixture
def cache_file(monkeypatch, tmp_path):
    file = tmp_path / "sub" / "gemm.json"
    monkeypatch.setenv("KRONLINALG_GEMM_CACHE", str(file))
    gemm_cache.forget()
    yield file
    gemm_cache.forget()


def test_no_file_no_cache(monkeypatch):
    monkeypatch.delenv("KRONLINALG_GEMM_CACHE", raising=False)
    assert gemm_cache.path() is None
    gemm_cache.put("scope", (1, 2), b"\x01" * 64)  # (nothing to write to)
    assert gemm_cache.get("scope", (1, 2)) is None


def test_an_entry_comes_back_in_another_process(cache_file):
    algo = bytes(range(64))
    gemm_cache.put("H100 sm90 cublasLt 130000", (2, 1, 0, 64, 25088, 256), algo, 4096)
    gemm_cache.put("H100 sm90 cublasLt 130000", (2, 0, 0, 48, 48, 48), None)
    gemm_cache.forget()  # a new process reads the file
    entry = gemm_cache.get("H100 sm90 cublasLt 130000", (2, 1, 0, 64, 25088, 256))
    assert bytes.fromhex(entry["algo"]) == algo and entry["workspace"] == 4096
    assert gemm_cache.get("H100 sm90 cublasLt 130000", (2, 0, 0, 48, 48, 48))["algo"] is None
    # another device, another cuBLASLt: nothing
    assert gemm_cache.get("H100 sm90 cublasLt 120900", (2, 1, 0, 64, 25088, 256)) is None
    assert not [p for p in os.listdir(cache_file.parent) if p != cache_file.name]  # no temp


def test_writes_merge_with_another_process(cache_file):
    gemm_cache.put("s", (1,), b"\x01" * 64)
    assert gemm_cache.get("s", (1,)) is not None  # (this process has read the file now)
    data = json.loads(cache_file.read_text())  # another process adds an entry meanwhile
    data["entries"]["s|2"] = {"algo": None, "workspace": 0}
    cache_file.write_text(json.dumps(data))
    gemm_cache.put("s", (3,), b"\x03" * 64)
    entries = json.loads(cache_file.read_text())["entries"]
    assert set(entries) == {"s|1", "s|2", "s|3"}


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"entries": 5}',
                                  '{"entries": {"s|1": "x"}}'])
def test_an_unreadable_file_is_no_entry(cache_file, text):
    cache_file.parent.mkdir(parents=True)
    cache_file.write_text(text)
    assert gemm_cache.get("s", (1,)) is None
    gemm_cache.put("s", (2,), None)  # and is replaced by a good one
    gemm_cache.forget()
    assert gemm_cache.get("s", (2,)) == {"algo": None, "workspace": 0}


def test_an_unwritable_place_keeps_the_choice_in_the_process(monkeypatch, tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("KRONLINALG_GEMM_CACHE", str(blocker / "gemm.json"))
    gemm_cache.forget()
    gemm_cache.put("s", (1,), b"\x01" * 64)  # no error
    assert gemm_cache.get("s", (1,))["algo"] == "01" * 64
    gemm_cache.forget()
