"""python/bench/device_check.py and dist_check.py say what they did: with no CUDA device visible they check
nothing and exit 77 (a skip, as automake's test drivers read it), not 0 (a pass), saying why.
dist_check.py --cpu runs its gloo checks on the CPU (its NCCL ones need GPUs)."""

import os
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "bench" / "device_check.py"
DIST = SCRIPT.with_name("dist_check.py")


def test_device_check_skips_without_a_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, str(SCRIPT), "--no-timing"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 77, out.stdout + out.stderr
    assert "skip: no CUDA device" in out.stdout and "nothing was checked" in out.stdout


def test_dist_check_skips_without_a_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, str(DIST)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 77, out.stdout + out.stderr
    assert "nothing was checked" in out.stdout


def test_dist_check_on_the_cpu():
    """Two gloo ranks: DDP's ranks equal one optimizer stepping the averaged gradient, and the sharded steps
    (FSDP's even split, chunk boundaries) equal the unsharded one."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, str(DIST), "--cpu", "--steps", "2"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.rstrip().endswith("all equal"), out.stdout + out.stderr
    assert "ok   gloo ddp" in out.stdout and out.stdout.count("ok   gloo sharded") == 4, out.stdout
