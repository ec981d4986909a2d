"""python/examples/finetune_fortunes.py runs end to end (a few steps) and prints, for torch's AdamW and for
collage's, the lost-update fraction and the final loss."""

import os
import re
import subprocess
import sys

import pytest

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "finetune_fortunes.py")
FORTUNES = "/usr/share/games/fortunes"
ROW = r"lost updates +(\d+\.\d)%   final loss (\d+\.\d+)   held-out (\d+\.\d+)"


@pytest.mark.skipif(not os.path.isdir(FORTUNES), reason=f"no {FORTUNES} (apt-get install fortunes)")
def test_finetune_example_prints_lost_updates_and_loss():
    # one thread: torch's small kernels on a busy machine's two threads can take 15 times as long
    out = subprocess.run([sys.executable, EXAMPLE, "--steps", "60", "--pretrain", "20", "--precision", "collage-plus"],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr
    rows = {}
    for line in out.stdout.splitlines():
        m = re.search(ROW, line)
        if m:
            rows["collage" if "collage.torch.AdamW (collage-plus)" in line else "torch"] = [float(v) for v in m.groups()]
    assert set(rows) == {"torch", "collage"}, out.stdout
    start = float(re.search(r"held-out loss (\d+\.\d+)", out.stdout).group(1))
    for lost, loss, held in rows.values():
        assert 0.0 <= lost <= 100.0 and 0.0 < loss < 8.0, out.stdout
        assert held < start, f"fine-tuning did not lower the held-out loss {start}: {out.stdout}"
