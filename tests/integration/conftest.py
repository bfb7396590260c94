"""Every temporary file and directory a test makes with `tempfile` (copied repositories, keys,
certificates, model folders) lands under one directory per pytest process, removed when the
process ends: they no longer pile up in /tmp (two thousand after a day of runs). Only this
process's `tempfile` moves; the server's own $TMPDIR (its Python environment cache, shared by
the test files on purpose) is left alone."""
import shutil
import tempfile

_root = None


def pytest_configure(config):
    global _root
    _root = tempfile.mkdtemp(prefix="cinfer-test-")
    tempfile.tempdir = _root


def pytest_unconfigure(config):
    tempfile.tempdir = None
    if _root:
        shutil.rmtree(_root, ignore_errors=True)
