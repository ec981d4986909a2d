"""Which libcollage.so the package loads, and the one version: include/collage.h's
COLLAGE_VERSION_STRING, the library's collage_version(), collage.__version__ and setup.py's version
agree; setup.py refuses to build when the package and the header disagree; a package with its own
libcollage.so inside loads that one (after $COLLAGE_LIB) and nothing else."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import collage
from collage import _lib

PYTHON_DIR = pathlib.Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parent


def header_version():
    text = (REPO / "include" / "collage.h").read_text()
    return re.search(r'^#define COLLAGE_VERSION_STRING "([^"]+)"', text, re.M).group(1)


def test_one_version():
    assert collage.__version__ == header_version()
    assert _lib.lib.collage_version().decode() == header_version()
    out = subprocess.run([sys.executable, "setup.py", "--version"], cwd=PYTHON_DIR, capture_output=True,
                         text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == header_version()


def test_setup_refuses_versions_that_differ(tmp_path):
    (tmp_path / "include").mkdir()
    shutil.copy(REPO / "include" / "collage.h", tmp_path / "include")
    shutil.copytree(PYTHON_DIR / "collage", tmp_path / "python" / "collage")
    shutil.copy(PYTHON_DIR / "setup.py", tmp_path / "python")
    init = tmp_path / "python" / "collage" / "__init__.py"
    init.write_text(init.read_text().replace(f'__version__ = "{collage.__version__}"', '__version__ = "9.8.7"'))
    out = subprocess.run([sys.executable, "setup.py", "--version"], cwd=tmp_path / "python", capture_output=True,
                         text=True)
    assert out.returncode != 0
    assert (f"the library's version ({header_version()}, include/collage.h) and the package's (__version__ "
            "9.8.7, python/collage/__init__.py) differ") in out.stderr


def test_bundled_library_comes_after_COLLAGE_LIB_only(tmp_path, monkeypatch):
    bundled = tmp_path / "libcollage.so"
    bundled.write_bytes(b"")
    monkeypatch.setattr(_lib, "BUNDLED", bundled)
    monkeypatch.setenv("COLLAGE_LIB", "/elsewhere/libcollage.so")
    assert list(_lib._candidates()) == ["/elsewhere/libcollage.so"]
    monkeypatch.delenv("COLLAGE_LIB")
    assert list(_lib._candidates()) == [str(bundled)]  # nothing further on: not the tree's, not pkg-config's
    monkeypatch.setattr(_lib, "BUNDLED", tmp_path / "absent.so")
    assert str(REPO / "build" / "libcollage.so") in list(_lib._candidates())


def test_a_bundled_library_that_does_not_load_is_named(tmp_path, monkeypatch):
    bundled = tmp_path / "libcollage.so"
    bundled.write_bytes(b"not a shared object")
    monkeypatch.setattr(_lib, "BUNDLED", bundled)
    monkeypatch.delenv("COLLAGE_LIB", raising=False)
    with pytest.raises(ImportError, match=r"cannot load the package's own libcollage.so: .*libcollage.so.*It needs "
                                          r"libopenblas.so.0, libdnnl.so.2, libgomp.so.1 \(Debian 12: apt-get "
                                          r"install libopenblas0 libdnnl2 libgomp1\)"):
        _lib._load()
