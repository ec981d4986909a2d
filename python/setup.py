"""The collage Python package: pure Python over libcollage.so (ctypes). `pip install ./python` builds
libcollage from the repository this folder sits in (the Makefile's library with its own flags, `make -jN`
into python/build/libcollage/) and puts it inside the package as collage/libcollage.so; `pip wheel ./python`
gives a wheel carrying it, tagged py3-none-<platform> (any Python 3, one platform). With $COLLAGE_LIB set
at install time nothing is built: that library's path is recorded in collage/_libpath.py instead (`make
python` does this, so its environment follows the tree's build). Works offline with Debian 12's
setuptools (`pip install --no-index`) and with setuptools from PyPI; the version is the library's
(include/collage.h), which collage/__init__.py must repeat."""

import os
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LIB_BUILD = os.path.join(HERE, "build", "libcollage")   # make's BUILD folder for the bundled library
# What the library's build needs from Debian (scripts/setup.sh installs these and more): named when it fails.
BUILD_DEBS = {"build-essential": "a C compiler and make", "libopenblas-dev": "OpenBLAS (cblas.h, -lopenblas)",
              "libdnnl-dev": "oneDNN (optional: without it the bf16 model takes the widening path)"}


def read_version():
    """COLLAGE_VERSION_STRING of include/collage.h; collage/__init__.py's __version__ must say the same."""
    header = os.path.join(REPO, "include", "collage.h")
    try:
        with open(header) as fh:
            lib = re.search(r'^#define COLLAGE_VERSION_STRING "([^"]+)"', fh.read(), re.M)
    except OSError as e:
        sys.exit(f"collage setup.py: cannot read {header} ({e.strerror}): the package installs from a checkout "
                 "of the collage repository (python/ inside it)")
    with open(os.path.join(HERE, "collage", "__init__.py")) as fh:
        pkg = re.search(r'^__version__ = "([^"]+)"', fh.read(), re.M)
    if not lib or not pkg or lib.group(1) != pkg.group(1):
        sys.exit(f"collage setup.py: the library's version ({lib and lib.group(1)}, include/collage.h) and the "
                 f"package's (__version__ {pkg and pkg.group(1)}, python/collage/__init__.py) differ: make them equal")
    return lib.group(1)


def missing_debs():
    if not shutil.which("dpkg-query"):
        return []
    out = []
    for name in BUILD_DEBS:
        st = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True)
        if "install ok installed" not in st.stdout:
            out.append(name)
    return out


def build_library():
    """make's libcollage.so into LIB_BUILD, with the Makefile's flags only: CFLAGS and LDLIBS of the
    environment (a -march=native would tie the library to this CPU; its AVX2 and AVX-512 kernels are
    chosen at run time) and MAKEFLAGS of a calling make (which may carry SAN=1 or BUILD=) are not passed.
    Quiet unless make fails: then the tail of its output and the Debian packages that are missing."""
    jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    env = {k: v for k, v in os.environ.items()
           if k not in ("CFLAGS", "LDLIBS", "LDFLAGS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    target = os.path.join(LIB_BUILD, "libcollage.so")
    cmd = ["make", "-C", REPO, f"-j{jobs}", "--no-print-directory", f"BUILD={LIB_BUILD}", target]
    print(f"collage: building libcollage: {' '.join(cmd)}", flush=True)
    try:
        run = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except FileNotFoundError:
        run = None
    if run is None or run.returncode != 0:
        tail = "make not found" if run is None else "\n".join(run.stdout.splitlines()[-30:])
        missing = missing_debs()
        hint = ("Debian packages missing: " + ", ".join(f"{d} ({BUILD_DEBS[d]})" for d in missing)
                if missing else "The Debian packages it needs are " + ", ".join(BUILD_DEBS))
        sys.stderr.write(f"{tail}\ncollage: building libcollage failed ({' '.join(cmd)}).\n{hint}; "
                         f"scripts/setup.sh installs them. Or set COLLAGE_LIB to a libcollage.so built "
                         "from this tree to install without building.\n")
        sys.exit(1)
    return target


class BuildPyWithLibrary(build_py):
    """The package's files, plus collage/libcollage.so (built here), or with $COLLAGE_LIB set
    collage/_libpath.py naming that library."""

    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "collage")
        bundled, record = os.path.join(pkg, "libcollage.so"), os.path.join(pkg, "_libpath.py")
        for stale in (bundled, record):   # from an earlier build the other way
            if os.path.exists(stale):
                os.remove(stale)
        env = os.environ.get("COLLAGE_LIB")
        if env:
            with open(record, "w") as fh:
                fh.write('"""The libcollage.so this package was installed against ($COLLAGE_LIB, setup.py)."""\n')
                fh.write(f"LIBRARY = {os.path.abspath(env)!r}\n")
        else:
            shutil.copyfile(build_library(), bundled)
            os.chmod(bundled, 0o755)

    def get_outputs(self, include_bytecode=1):
        extra = "libcollage.so" if not os.environ.get("COLLAGE_LIB") else "_libpath.py"
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, "collage", extra)]


cmdclass = {"build_py": BuildPyWithLibrary}
try:  # setuptools >= 70.1 has bdist_wheel; before, the wheel package (Debian 12: python3-wheel)
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        bdist_wheel = None
if bdist_wheel is not None:
    class PlatformWheel(bdist_wheel):
        """A wheel for one platform (it carries libcollage.so) and any Python 3 (ctypes, no extension)."""

        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            return ("py3", "none", super().get_tag()[2])

    cmdclass["bdist_wheel"] = PlatformWheel


setup(
    name="collage",
    version=read_version(),
    description="Exact pure-16-bit training (Collage): a PyTorch AdamW over libcollage, numerics, safetensors",
    packages=["collage", "collage.torch"],
    python_requires=">=3.9",
    install_requires=["numpy"],
    extras_require={"torch": ["torch>=1.13"]},
    cmdclass=cmdclass,
    zip_safe=False,
)
