"""The collage Python package: pure Python over libcollage.so (ctypes), so it installs offline with
Debian's setuptools: `pip install ./python` (in a virtual environment with --system-site-packages to see
Debian's torch and numpy), or `make python`. The library it will load is found at build time and
written into collage/_libpath.py: $COLLAGE_LIB, else this tree's build/libcollage.so, else pkg-config's
collage; at run time $COLLAGE_LIB still comes first."""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def find_library():
    env = os.environ.get("COLLAGE_LIB")
    if env:
        return os.path.abspath(env)
    tree = os.path.join(HERE, "..", "build", "libcollage.so")
    if os.path.exists(tree):
        return os.path.abspath(tree)
    if shutil.which("pkg-config"):
        out = subprocess.run(["pkg-config", "--variable=libdir", "collage"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return os.path.join(out.stdout.strip(), "libcollage.so")
    return None


class BuildPyWithLibraryPath(build_py):
    def run(self):
        super().run()
        with open(os.path.join(self.build_lib, "collage", "_libpath.py"), "w") as fh:
            fh.write('"""The libcollage.so this package was installed against (setup.py)."""\n')
            fh.write(f"LIBRARY = {find_library()!r}\n")


setup(
    name="collage",
    version="0.1.0",
    description="Exact pure-16-bit training (Collage): a PyTorch AdamW over libcollage, numerics, safetensors",
    packages=["collage", "collage.torch"],
    python_requires=">=3.9",
    install_requires=["numpy"],
    extras_require={"torch": ["torch>=1.13"]},
    cmdclass={"build_py": BuildPyWithLibraryPath},
)
