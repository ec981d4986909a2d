"""Bad input gives a clear exception naming the parameter (or the file) and the problem."""

import pytest
import torch

import collage
import collage.torch as ct


def test_unsupported_dtype_names_the_parameter():
    m = torch.nn.Linear(3, 2)  # fp32 weights for a bf16 strategy
    with pytest.raises(TypeError, match=r"parameter 'weight' is torch.float32, but 'collage-light' steps "
                                        r"torch.bfloat16 weights \(collage.torch.to_collage"):
        ct.AdamW(m.named_parameters(), precision="collage-light")
    with pytest.raises(TypeError, match=r"parameter 0 of param group 0 \(shape \(4,\)\) is torch.int64"):
        ct.AdamW([torch.zeros(4, dtype=torch.int64)], precision="fp32")


def test_non_contiguous_parameter():
    p = torch.nn.Parameter(torch.zeros(4, 6, dtype=torch.bfloat16).t())
    with pytest.raises(ValueError, match=r"parameter 'w.t' is not contiguous"):
        ct.AdamW([("w.t", p)], precision="collage-plus")


def test_mixed_devices_in_a_group():
    a = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16))
    b = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16, device="meta"))
    with pytest.raises(ValueError, match=r"param group 0 mixes devices \(cpu, meta\)"):
        ct.AdamW([a, b])
    ct.AdamW([{"params": [a]}, {"params": [b]}])  # one device per group is fine


def test_non_contiguous_gradient():
    p = torch.nn.Parameter(torch.zeros(4, 6, dtype=torch.bfloat16))
    opt = ct.AdamW([("w", p)])
    p.grad = torch.ones(6, 4, dtype=torch.bfloat16).t()
    with pytest.raises(ValueError, match="parameter 'w': its gradient is not contiguous"):
        opt.step()


def test_unknown_precision_lists_the_strategies():
    with pytest.raises(ValueError, match=r"precision 'collage-max': unknown strategy 'collage-max'; the presets are "
                                         r"fp32, bf16, "):
        ct.AdamW([torch.zeros(2, dtype=torch.bfloat16)], precision="collage-max")


def test_bad_hyperparameters():
    p = [torch.zeros(2, dtype=torch.bfloat16)]
    with pytest.raises(ValueError, match=r"param group 0: betas \(0.9, 1.0\) must be two numbers in \(0, 1\)"):
        ct.AdamW(p, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="max_grad_norm must be a positive finite number"):
        ct.AdamW(p, max_grad_norm=float("inf"))
    with pytest.raises(ValueError, match="backend must be"):
        ct.AdamW(p, backend="gpu")


def test_c_backend_refuses_other_devices():
    p = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16, device="meta"))
    opt = ct.AdamW([("m", p)], backend="c")
    p.grad = torch.zeros(3, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match="parameter 'm' is on meta; backend='c' steps CPU tensors only"):
        opt.step()


def test_missing_checkpoint_names_the_file(tmp_path):
    with pytest.raises(collage.CollageError, match=f"cannot open '{tmp_path}/nope': No such file"):
        collage.export(tmp_path / "nope", tmp_path / "out")
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"\0" * 2000)
    with pytest.raises(collage.CollageError, match=r"model.bin. is not a model checkpoint \(known formats"):
        ct.load(bad)


@pytest.mark.parametrize("name", [s.name for s in collage.strategies() if s.weights.format == "fp16"])
def test_fp16_strategies_refused_with_the_reason(name):
    p = torch.zeros(4, dtype=torch.float16, requires_grad=True)
    with pytest.raises(NotImplementedError, match="fp16 strategy"):
        ct.AdamW([p], precision=name, eps=1e-4)
    with pytest.raises(NotImplementedError, match="loss scaling"):
        ct.to_collage(torch.nn.Linear(2, 2), name)


def _fingerprint(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_every_python_reader_checks_a_checkpoint(tmp_path, damage):
    """collage.export and collage.torch.load, given the run folder or its model.bin, check the model file
    against its train.state: the file and the problem named, the folder unchanged, nothing written."""
    import os
    import subprocess
    run = tmp_path / "run"
    out = subprocess.run([os.environ["COLLAGE_BIN"], "train", "--model", "tiny", "--layers", "1", "--dim", "32", "--heads",
                          "2", "--batch", "4", "--seq", "16", "--steps", "2", "--threads", "1", "--quiet", "--save",
                          str(run)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    model = run / "step-00000002" / "model.bin"
    ct.load(run)  # intact: read
    data = bytearray(model.read_bytes())
    if damage == "flip":
        data[5000] ^= 1
        want = f"'{model}' is damaged or was replaced: its checksum does not match"
    else:
        del data[1000:]
        want = f"'{model}' has 1000 bytes but '{run}/step-00000002/train.state' records"
    model.write_bytes(bytes(data))
    before = _fingerprint(run)
    for call in (lambda: collage.export(run, tmp_path / "out"), lambda: collage.export(model, tmp_path / "out"),
                 lambda: ct.load(run), lambda: ct.load(model)):
        with pytest.raises(collage.CollageError) as e:
            call()
        assert want in str(e.value)
        assert _fingerprint(run) == before and not (tmp_path / "out").exists()
