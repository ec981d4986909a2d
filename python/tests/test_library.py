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


def test_a_failed_build_shows_makes_tail_and_the_missing_packages(tmp_path):
    """setup.py without $COLLAGE_LIB runs make; a `make` that fails (here a stand-in that cannot find
    cblas.h, beside a dpkg-query saying libopenblas-dev is not installed) ends the build with the tail
    of make's output, the command, and the Debian package to install."""
    (tmp_path / "include").mkdir()
    shutil.copy(REPO / "include" / "collage.h", tmp_path / "include")
    shutil.copytree(PYTHON_DIR / "collage", tmp_path / "python" / "collage",
                    ignore=shutil.ignore_patterns("__pycache__", "libcollage.so", "_libpath.py"))
    shutil.copy(PYTHON_DIR / "setup.py", tmp_path / "python")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text('#!/bin/sh\nfor i in $(seq 1 50); do echo "make line $i"; done\n'
                                  'echo "src/nn/matmul.c:3:10: fatal error: cblas.h: No such file or directory"\n'
                                  'exit 2\n')
    (bin_dir / "dpkg-query").write_text('#!/bin/sh\nfor a; do name=$a; done\n'
                                        'if [ "$name" = libopenblas-dev ]; then echo "unknown ok not-installed"; '
                                        'else echo "install ok installed"; fi\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "COLLAGE_LIB"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    out = subprocess.run([sys.executable, "setup.py", "-q", "build_py"], cwd=tmp_path / "python", env=env,
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert "fatal error: cblas.h" in out.stderr and "make line 50" in out.stderr
    assert "make line 1\n" not in out.stderr   # the tail, not all of it
    assert "collage: building libcollage failed (make -C " in out.stderr
    assert "Debian packages missing: libopenblas-dev (OpenBLAS (cblas.h, -lopenblas)); scripts/setup.sh installs them" \
        in out.stderr
    assert not (tmp_path / "python" / "build" / "lib" / "collage" / "libcollage.so").exists()
