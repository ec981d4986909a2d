"""python/bench/device_check.py says what it did: with no CUDA device visible it checks nothing and exits
77 (a skip, as automake's test drivers read it), not 0 (a pass), saying why."""

import os
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "bench" / "device_check.py"


def test_device_check_skips_without_a_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, str(SCRIPT), "--no-timing"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 77, out.stdout + out.stderr
    assert "skip: no CUDA device" in out.stdout and "nothing was checked" in out.stdout
