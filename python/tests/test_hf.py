"""Hugging Face transformers with collage: `collage export` folders load into GPT2LMHeadModel,
LlamaForCausalLM and BertForMaskedLM (and through the Auto classes) as they are, and the loaded model's
logits are the library's; transformers' own classes, with their parameters in bf16, train under
collage.torch.AdamW, Lion and SGD in a plain loop and through transformers.Trainer, whose checkpoints resume
bit for bit (model and every optimizer word); save_pretrained folders read by collage (export, eval, train
--init) keep every bf16 word and give transformers' loss, and what collage cannot compute is refused.
`collage tokenize --tokenizer gpt2` gives the ids of transformers' fast GPT-2 tokenizer, and `python -m
collage.compare` writes `collage compare`'s results.csv and report tables.
Offline: models come from small configs, never from the hub."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import ctypes  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip(
    "transformers", reason="Hugging Face transformers is not installed here (python/torch2-pin.txt pins it "
    "in the PyTorch 2 environment of scripts/torch2-env.sh)")

import collage  # noqa: E402
import collage.torch as ct  # noqa: E402
from collage import _lib  # noqa: E402
from test_export import L, VOCAB, assert_next_logits, checkpoint, llama_checkpoint  # noqa: E402

torch.set_num_threads(1)  # tiny models: a second thread only waits (and spins on a busy machine)
ROOT = pathlib.Path(__file__).resolve().parents[2]


def load(cls, folder, **kw):
    """cls.from_pretrained(folder) with its loading report: every tensor of the file used, none missing."""
    model, info = cls.from_pretrained(folder, output_loading_info=True, **kw)
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(k), f"{cls.__name__} from {folder}: {k} {info[k]}"
    return model.eval()


# ---------------------------------------------------------------- collage → Hugging Face
# The tolerance of assert_next_logits (rtol 1e-4, atol 1e-4 · max |logit|): both sides are fp32 forwards
# of the same fp32 weights that differ only in the order of their sums (the library's GEMMs and attention
# against torch's), a few ulps per operation over two blocks; a wrong name, orientation or rotation moves
# logits by O(1).
@pytest.mark.parametrize("family", ["gpt2", "llama", "llama-untied"])
def test_causal_export_loads_and_gives_collage_logits(tmp_path, family):
    ck = tmp_path / "model.bin"
    cfg = checkpoint(ck, bf16=False) if family == "gpt2" else llama_checkpoint(ck, untied=family.endswith("untied"))
    collage.export(ck, tmp_path / "hf")
    cls = transformers.GPT2LMHeadModel if family == "gpt2" else transformers.LlamaForCausalLM
    tokens = np.random.default_rng(6).integers(0, VOCAB, 40).astype(np.int32)
    for model in (load(cls, tmp_path / "hf"), load(transformers.AutoModelForCausalLM, tmp_path / "hf")):
        assert type(model) is cls
        assert all(p.dtype == torch.float32 for p in model.parameters())
        if family != "llama-untied":
            assert model.lm_head.weight is model.get_input_embeddings().weight, "tied on load"
        with torch.no_grad():
            logits = model(torch.from_numpy(tokens).long()[None]).logits[0]
        assert_next_logits(ck, cfg, tokens, logits)


def test_bf16_export_loads_in_bf16(tmp_path):
    """A bf16 export's config says bfloat16: from_pretrained keeps the weights' bits in bf16 (its default
    dtype follows the config), and dtype=torch.float32 widens them exactly."""
    checkpoint(tmp_path / "model.bin", bf16=True)
    collage.export(tmp_path, tmp_path / "hf")
    sd = ct.load(tmp_path / "hf")
    m16 = load(transformers.GPT2LMHeadModel, tmp_path / "hf")
    m32 = load(transformers.AutoModelForCausalLM, tmp_path / "hf", dtype=torch.float32)
    s16, s32 = m16.state_dict(), m32.state_dict()
    for k, v in sd.items():
        assert v.dtype == torch.bfloat16
        assert s16[k].dtype == torch.bfloat16 and torch.equal(s16[k].view(torch.int16), v.view(torch.int16)), k
        assert s32[k].dtype == torch.float32 and torch.equal(s32[k], v.float()), k


def test_bert_export_loads_and_gives_collage_logits(tmp_path):
    cfg = _lib.ModelConfig()
    _lib.check(L.collage_model_preset(b"bert-tiny", ctypes.byref(cfg)), "preset")
    L.collage_model_config_set_vocab(ctypes.byref(cfg), VOCAB)
    V = cfg.vocab_size
    w = (np.random.default_rng(8).standard_normal(L.collage_model_num_params(ctypes.byref(cfg))) * 0.1).astype(np.float32)
    ck, err = tmp_path / "model.bin", ctypes.create_string_buffer(512)
    _lib.check(L.collage_model_save_file(str(ck).encode(), ctypes.byref(cfg), w.ctypes.data, 0, err, 512), "save",
               err.value)
    collage.export(ck, tmp_path / "hf")
    tokens = np.random.default_rng(2).integers(0, V, 48).astype(np.int32)
    tokens[[3, 20]] = V - 1  # the mask token
    pos = np.array([0, 3, 20, 47], dtype=np.int32)
    m = ctypes.c_void_p()
    _lib.check(L.collage_model_create(ctypes.byref(cfg), 0, 1, len(tokens), ctypes.byref(m)), "create")
    try:
        want = np.empty((len(pos), V), dtype=np.float32)
        _lib.check(L.collage_model_logits_at(m, w.ctypes.data, tokens.ctypes.data, len(tokens), pos.ctypes.data,
                                             len(pos), want.ctypes.data), "logits_at")
    finally:
        L.collage_model_free(m)
    for model in (load(transformers.BertForMaskedLM, tmp_path / "hf"),
                  load(transformers.AutoModelForMaskedLM, tmp_path / "hf")):
        assert type(model) is transformers.BertForMaskedLM
        assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight, "tied on load"
        with torch.no_grad():
            got = model(torch.from_numpy(tokens).long()[None]).logits[0, pos].numpy()
        assert np.allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max()), f"max |diff| {np.abs(got - want).max()}"


# ---------------------------------------------------------------- transformers' classes trained by collage.torch
def tiny(family, seed=0):
    """A freshly initialised transformers model of a tiny config, its parameters in bf16 (no fp32 copy
    anywhere: the optimizer's words are the rest of each weight)."""
    torch.manual_seed(seed)
    common = dict(vocab_size=256, max_position_embeddings=32)
    if family == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=256, n_positions=32, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(cfg)
    elif family == "llama":
        cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, **common)
        model = transformers.LlamaForCausalLM(cfg)
    elif family == "bert":
        cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **common)
        model = transformers.BertForMaskedLM(cfg)
    else:  # RoBERTa: positions from pad_token_id + 1, one token type
        cfg = transformers.RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, vocab_size=256,
                                         max_position_embeddings=34, pad_token_id=1, type_vocab_size=1)
        model = transformers.RobertaForMaskedLM(cfg)
    return model.to(torch.bfloat16).train()


def batch(family, n=4, T=16, seed=1, x=None):
    """Model inputs of n sequences of T byte tokens (random, or the (n, T) tensor x); for BERT and RoBERTa
    every fourth token replaced by the mask token (255) and only those predicted."""
    if x is None:
        x = torch.randint(0, 255, (n, T), generator=torch.Generator().manual_seed(seed))
    n, T = x.shape
    if family not in ("bert", "roberta"):
        return dict(input_ids=x, labels=x.clone())
    masked = torch.zeros(n, T, dtype=torch.bool)
    masked[:, ::4] = True
    return dict(input_ids=x.masked_fill(masked, 255), labels=x.masked_fill(~masked, -100))


FAMILIES = ["gpt2", "llama", "bert", "roberta"]
PRECISIONS = ["collage-light", "bf16-sr"]  # the strategy with a compensation word, and the one with none


def rows(data):
    """A batch dict as a list of per-sequence dicts: a dataset Trainer's default collator stacks again."""
    n = len(data["input_ids"])
    return [{k: v[i] for k, v in data.items()} for i in range(n)]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_plain_loop_trains_a_bf16_model(family, precision):
    """30 steps of collage.torch.AdamW on one batch in a plain loop: the forward runs in bf16, the loss
    falls, the parameters, their gradients and every optimizer word stay bf16."""
    model = tiny(family)
    opt = ct.AdamW(model.named_parameters(), precision=precision, lr=1e-2, weight_decay=0.0)
    data, losses = batch(family), []
    for _ in range(30):
        out = model(**data)
        assert out.logits.dtype == torch.bfloat16, "no autocast: the forward runs in bf16"
        loss = out.loss  # transformers takes the cross-entropy of the logits widened to fp32
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert all(np.isfinite(losses)) and losses[-1] < 0.5 * losses[0], f"{family} {precision}: losses {losses}"
    for p in model.parameters():
        assert p.dtype == torch.bfloat16 and p.grad.dtype == torch.bfloat16
        for k, w in opt.state[p].items():
            assert not torch.is_tensor(w) or w.dtype == torch.bfloat16 or w.ndim == 0, f"{k}: {w.dtype}"


# ---------------------------------------------------------------- transformers.Trainer
def hf_trainer_example():
    """python/examples/hf_trainer.py as a module (its run() is what the tests drive)."""
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate (python/torch2-pin.txt pins it)")
    import importlib.util
    spec = importlib.util.spec_from_file_location("hf_trainer", ROOT / "python" / "examples" / "hf_trainer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bits(t):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.int32) if t.dtype == torch.float32 else t


def assert_same_state(a, b, where):
    """Two optimizer state dicts (or model state dicts) hold the same words: same keys, dtypes, bits."""
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype} vs {b.dtype}"
        assert torch.equal(bits(a), bits(b)), f"{where}: values differ"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            assert_same_state(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a} vs {b}"


def adamw(precision):
    """The example's collage.torch.AdamW (clipping, weight decay) with another strategy; bf16-sr's seeded
    random stream is part of its state, so a resumed run rounds as the unbroken one did."""
    return lambda params: ct.AdamW(params, precision=precision, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1,
                                   max_grad_norm=1.0, seed=7)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_trainer_checkpoint_resumes_bit_for_bit(tmp_path, family, precision):
    """python/examples/hf_trainer.py's run with each family's tiny model on the fortunes' bytes (masked for
    BERT and RoBERTa) and collage.torch.AdamW with a scheduler handed in: 6 steps unbroken, and 3 steps from
    its checkpoint-3 in a fresh process's worth of objects (new model, optimizer, Trainer), end with the same
    model bits, every optimizer word and the scheduler the same. The checkpoint's optimizer.pt keeps each of
    the strategy's words in its own dtype."""
    ex = hf_trainer_example()
    x = torch.stack([r["input_ids"] for r in ex.dataset()])  # 32 sequences of 16 bytes
    kw = dict(steps=6, save_steps=3, optimizer=adamw(precision), make_model=lambda: tiny(family),
              data=rows(batch(family, x=x)))
    whole = ex.run(tmp_path / "whole", **kw)
    losses = [r["loss"] for r in whole.state.log_history if "loss" in r]
    assert len(losses) == 6 and all(np.isfinite(losses)), losses
    ck = tmp_path / "whole" / "checkpoint-3"
    saved = torch.load(ck / "optimizer.pt", weights_only=False)
    live = whole.optimizer.state_dict()
    assert saved["collage"]["precision"] == live["collage"]["precision"] == precision
    want = {w.key for w in collage.strategy(precision).words if w.key != "weights"}
    words = [(k, w.dtype) for s in saved["state"].values() for k, w in s.items() if torch.is_tensor(w) and w.ndim]
    assert {k for k, _ in words} == want and all(d == torch.bfloat16 for _, d in words), words
    resumed = ex.run(tmp_path / "resumed", resume=str(ck), **kw)
    assert resumed.state.global_step == 6
    # steps 1-3 from the checkpoint's trainer_state.json, steps 4-6 run anew
    assert [r["loss"] for r in resumed.state.log_history if "loss" in r] == losses
    assert_same_state(whole.model.state_dict(), resumed.model.state_dict(), "model")
    assert_same_state(live, resumed.optimizer.state_dict(), "optimizer")
    assert_same_state(whole.lr_scheduler.state_dict(), resumed.lr_scheduler.state_dict(), "scheduler")
    # and the steps after the checkpoint moved the weights it holds (so equal end states mean something)
    final, at3 = resumed.model.state_dict(), file_tensors(ck)
    assert at3.keys() <= final.keys() and any(not torch.equal(bits(final[k]), bits(v)) for k, v in at3.items())


def test_trainer_builds_the_optimizer_from_cls_and_kwargs(tmp_path):
    """optimizer_cls_and_kwargs=(collage.torch.AdamW, kwargs): Trainer makes its two param groups (weight
    decay, and none for biases and norms) as collage.torch.AdamW groups and trains the bf16 model."""
    ex = hf_trainer_example()
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=4,
                                          weight_decay=0.1, max_grad_norm=0.0, use_cpu=True, report_to="none",
                                          save_strategy="no", logging_steps=1, disable_tqdm=True)
    tr = transformers.Trainer(model=ex.model(), args=args, train_dataset=ex.dataset(),
                              optimizer_cls_and_kwargs=(ct.AdamW, dict(precision="collage-light", lr=3e-3)))
    tr.train()
    opt = tr.optimizer.optimizer  # inside accelerate's AcceleratedOptimizer
    assert isinstance(opt, ct.AdamW) and opt.strategy.name == "collage-light"
    assert sorted(g["weight_decay"] for g in opt.param_groups) == [0.0, 0.1]
    losses = [r["loss"] for r in tr.state.log_history if "loss" in r]
    assert len(losses) == 4 and losses[-1] < losses[0], losses
    assert all(p.dtype == torch.bfloat16 for p in tr.model.parameters())


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_trainer_trains_each_family(tmp_path, family, precision):
    """Each of the paper's four families as its transformers class, in bf16, through Trainer with a
    collage.torch.AdamW handed in (Trainer's own scheduler): 30 steps on one batch, the loss falls, the
    parameters stay bf16."""
    hf_trainer_example()
    model = tiny(family)
    opt = ct.AdamW(model.named_parameters(), precision=precision, lr=1e-2, weight_decay=0.0)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=30, per_device_train_batch_size=8,
                                          max_grad_norm=0.0, use_cpu=True, report_to="none", save_strategy="no",
                                          logging_steps=1, disable_tqdm=True)
    tr = transformers.Trainer(model=model, args=args, train_dataset=rows(batch(family, n=8)), optimizers=(opt, None))
    tr.train()
    losses = [r["loss"] for r in tr.state.log_history if "loss" in r]
    assert len(losses) == 30 and all(np.isfinite(losses)), f"{family} {precision}: {losses}"
    assert losses[-1] < 0.5 * losses[0], f"{family} {precision}: {losses}"
    assert all(p.dtype == torch.bfloat16 for p in tr.model.parameters())


def test_example_refuses_a_missing_checkpoint(tmp_path):
    hf_trainer_example()
    r = subprocess.run([sys.executable, str(ROOT / "python" / "examples" / "hf_trainer.py"), "--out", str(tmp_path),
                        "--resume", str(tmp_path / "nope")], capture_output=True, text=True)
    assert r.returncode == 1 and f"--resume '{tmp_path}/nope' is not a folder" in r.stderr


# ---------------------------------------------------------------- greedy text: collage sample and generate
@pytest.mark.parametrize("preset", ["tiny", "llama-tiny"])
def test_greedy_generate_writes_collage_samples_text(tmp_path, preset):
    """A byte-level model (256 tokens, random weights): `collage sample --temperature 0` and transformers'
    greedy generate over its export continue a prompt with the same bytes."""
    exe = os.environ.get("COLLAGE_BIN") or str(ROOT / "build" / "collage")
    if not os.path.exists(exe):
        pytest.skip(f"no collage command at {exe}")
    cfg = _lib.ModelConfig()
    _lib.check(L.collage_model_preset(preset.encode(), ctypes.byref(cfg)), "preset")
    L.collage_model_config_set_vocab(ctypes.byref(cfg), 256)
    w = (np.random.default_rng(1).standard_normal(L.collage_model_num_params(ctypes.byref(cfg))) * 0.1).astype(np.float32)
    ck, err = tmp_path / "model.bin", ctypes.create_string_buffer(512)
    _lib.check(L.collage_model_save_file(str(ck).encode(), ctypes.byref(cfg), w.ctypes.data, 0, err, 512), "save",
               err.value)
    prompt, n = b"Hello", 16
    r = subprocess.run([exe, "sample", "--checkpoint", str(ck), "--prompt", prompt.decode(), "--tokens", str(n),
                        "--temperature", "0", "--tokenizer", "byte", "--threads", "1"], capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    collage.export(ck, tmp_path / "hf")
    model = load(transformers.AutoModelForCausalLM, tmp_path / "hf")
    with torch.no_grad():
        out = model.generate(torch.tensor([list(prompt)]), max_new_tokens=n, do_sample=False, pad_token_id=0)
    assert len(out[0]) == len(prompt) + n
    assert r.stdout == bytes(out[0].tolist()) + b"\n"


# ---------------------------------------------------------------- collage.torch.Lion and SGD
@pytest.mark.parametrize("opt_cls,kw", [(ct.Lion, dict(lr=3e-3)), (ct.SGD, dict(lr=0.2, momentum=0.9))],
                         ids=["lion", "sgd"])
def test_lion_and_sgd_train_a_bf16_gpt2(opt_cls, kw):
    """The other update rules on transformers' GPT-2 with its parameters in bf16, in a plain loop."""
    model, data, losses = tiny("gpt2"), batch("gpt2"), []
    opt = opt_cls(model.named_parameters(), precision="collage-light", **kw)
    for _ in range(15):
        loss = model(**data).loss
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert all(np.isfinite(losses)) and losses[-1] < 0.9 * losses[0], f"{opt_cls.__name__}: losses {losses}"
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())


def test_trainer_resumes_lion_bit_for_bit(tmp_path):
    """python/examples/hf_trainer.py's run with collage.torch.Lion handed to Trainer: resuming from
    checkpoint-2 ends with the unbroken run's model bits and optimizer words."""
    ex = hf_trainer_example()
    lion = lambda params: ct.Lion(params, precision="collage-light", lr=1e-3, weight_decay=0.1)  # noqa: E731
    whole = ex.run(tmp_path / "whole", steps=4, save_steps=2, optimizer=lion)
    resumed = ex.run(tmp_path / "resumed", steps=4, save_steps=2, resume=str(tmp_path / "whole" / "checkpoint-2"),
                     optimizer=lion)
    assert resumed.state.global_step == 4 and isinstance(resumed.optimizer.optimizer, ct.Lion)
    assert_same_state(whole.model.state_dict(), resumed.model.state_dict(), "model")
    assert_same_state(whole.optimizer.state_dict(), resumed.optimizer.state_dict(), "optimizer")


# ---------------------------------------------------------------- Hugging Face → collage
def collage_exe():
    exe = os.environ.get("COLLAGE_BIN") or str(ROOT / "build" / "collage")
    if not os.path.exists(exe):
        pytest.skip(f"no collage command at {exe}")
    return exe


def collage_cli(*args, ok=True):
    r = subprocess.run([collage_exe(), *map(str, args)], capture_output=True, text=True)
    assert (r.returncode == 0) == ok, f"collage {' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr}"
    return r


def readable(family, seed=0, **over):
    """A transformers model of a tiny config that collage computes exactly (GPT-2 as GPT2Config has it;
    LLaMA untied, ε 1e-5; BERT with gelu_new, ε 1e-5 and one token type), every parameter drawn at random
    (norms around 1) so that a misplaced element shows, in bf16."""
    torch.manual_seed(seed)
    if family == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=256, n_positions=32, n_embd=32, n_layer=2, n_head=2, **over))
    elif family.startswith("llama"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-5,
            tie_word_embeddings=family == "llama-tied", **over))
    else:
        model = transformers.BertForMaskedLM(transformers.BertConfig(
            vocab_size=257, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
            max_position_embeddings=32, hidden_act="gelu_new", layer_norm_eps=1e-5, type_vocab_size=1, **over))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "norm" in name.lower() and "weight" in name else 0.0))
    return model.to(torch.bfloat16).eval()


def file_tensors(folder):
    from safetensors.torch import load_file
    return load_file(str(pathlib.Path(folder) / "model.safetensors"))


def assert_same_tensors(a, b, where):
    assert a.keys() == b.keys(), f"{where}: {sorted(a.keys() ^ b.keys())}"
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, f"{where}: {k}"
        assert torch.equal(bits(a[k]), bits(b[k])), f"{where}: {k} differs"


@pytest.mark.parametrize("family", ["gpt2", "llama", "llama-tied", "bert"])
def test_save_pretrained_through_collage_keeps_every_word(tmp_path, family):
    """save_pretrained (bf16) → collage export → the same tensors bit for bit, which from_pretrained loads
    into the same state dict; and → collage train --init (2 steps at lr 0, saved) → export: the same again."""
    model = readable(family)
    model.save_pretrained(tmp_path / "hf")
    collage_cli("export", "--checkpoint", tmp_path / "hf", "--out", tmp_path / "back")
    assert_same_tensors(file_tensors(tmp_path / "hf"), file_tensors(tmp_path / "back"), "export")
    cls = type(model)
    again = load(cls, tmp_path / "back", dtype=torch.bfloat16)
    assert_same_state(model.state_dict(), again.state_dict(), "from_pretrained")
    data = tmp_path / "text.txt"
    data.write_bytes(bytes(np.random.default_rng(2).integers(32, 127, 4096).astype(np.uint8)))
    collage_cli("train", "--init", tmp_path / "hf", "--data", data, "--steps", 2, "--batch", 2, "--seq", 16,
                "--lr", 0, "--wd", 0, "--precision", "bf16-master", "--save", tmp_path / "run", "--threads", 1)
    collage_cli("export", "--checkpoint", tmp_path / "run", "--out", tmp_path / "trained", "--dtype", "bf16")
    assert_same_tensors(file_tensors(tmp_path / "hf"), file_tensors(tmp_path / "trained"), "train --init at lr 0")


def windows(data, B, T):
    """collage eval --split all's first batch: B windows of T + 1 tokens in corpus order (the byte tokenizer)."""
    x = torch.tensor(list(data[: B * T + 1]), dtype=torch.long)
    return torch.stack([x[b * T: b * T + T + 1] for b in range(B)])


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_eval_of_a_saved_model_gives_transformers_loss(tmp_path, family):
    """collage eval of a save_pretrained folder: the mean cross-entropy transformers' model computes in fp32
    on the same windows (the weights are the bf16 ones, exact in fp32), within fp32 rounding of two
    forwards whose sums go in different orders."""
    model = readable(family)
    model.save_pretrained(tmp_path / "hf")
    data = bytes(np.random.default_rng(3).integers(32, 127, 2048).astype(np.uint8))
    (tmp_path / "text.txt").write_bytes(data)
    B, T = 4, 16
    r = collage_cli("eval", "--checkpoint", tmp_path / "hf", "--data", tmp_path / "text.txt", "--split", "all",
                    "--batch", B, "--seq", T, "--batches", 1, "--json", "--threads", 1)
    import json
    got = json.loads(r.stdout)["loss"]
    w = windows(data, B, T)
    with torch.no_grad():
        logits = model.float()(w[:, :T]).logits
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1)).item()
    assert abs(got - want) <= 2e-5 * want, f"collage eval {got}, transformers {want}"


@pytest.mark.parametrize("family,precision", [("gpt2", "collage-light"), ("llama", "bf16-master"),
                                              ("bert", "collage-light")])
def test_train_continues_a_saved_model(tmp_path, family, precision):
    """A save_pretrained folder continued by collage train: the run goes, its losses finite and falling."""
    readable(family).save_pretrained(tmp_path / "hf")
    data = tmp_path / "text.txt"
    data.write_bytes(bytes(np.random.default_rng(4).integers(97, 123, 8192).astype(np.uint8)))
    collage_cli("train", "--init", tmp_path / "hf", "--data", data, "--steps", 12, "--batch", 4, "--seq", 16,
                "--lr", 3e-3, "--warmup", 0, "--precision", precision, "--log", tmp_path / "log.jsonl",
                "--threads", 1)
    import json
    losses = [json.loads(line)["loss"] for line in (tmp_path / "log.jsonl").read_text().splitlines()
              if '"loss"' in line]
    assert len(losses) == 12 and all(np.isfinite(losses)), losses
    assert np.mean(losses[-3:]) < np.mean(losses[:3]), losses


@pytest.mark.parametrize("what,over,words", [
    ("bert", {}, ["hidden_act", "gelu_new"]),  # BertConfig's own gelu (erf) and ε 1e-12
    ("llama", dict(attention_bias=True), ["attention_bias"]),
    ("llama", dict(hidden_act="gelu"), ["hidden_act"]),
    ("gpt2", dict(activation_function="relu"), ["activation_function"]),
    ("roberta", {}, ["RoBERTa"]),
])
def test_train_refuses_what_collage_cannot_compute(tmp_path, what, over, words):
    """collage train --init of a folder collage cannot compute exactly: exit 1, a message naming config.json
    and the key, and no run folder."""
    if what == "bert":
        model = transformers.BertForMaskedLM(transformers.BertConfig(
            vocab_size=257, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128))
    elif what == "roberta":
        model = transformers.RobertaForMaskedLM(transformers.RobertaConfig(
            vocab_size=257, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128,
            max_position_embeddings=40, type_vocab_size=1, layer_norm_eps=1e-5, hidden_act="gelu_new"))
    else:
        model = readable(what, **over)
    model.save_pretrained(tmp_path / "hf")
    r = collage_cli("train", "--init", tmp_path / "hf", "--steps", 1, "--save", tmp_path / "run", ok=False)
    assert r.returncode == 1 and "config.json" in r.stderr and all(w in r.stderr for w in words), r.stderr
    assert "hint:" in r.stderr and not (tmp_path / "run").exists()


# ---------------------------------------------------------------- GPT-2's tokenizer: collage tokenize and transformers'
def gpt2_vocab_dir():
    """The folder `collage tokenize --tokenizer gpt2` reads (its order: $COLLAGE_GPT2_VOCAB_DIR, then the
    two installed places), or skip."""
    env = os.environ.get("COLLAGE_GPT2_VOCAB_DIR")
    for d in [env] if env else ["/usr/local/share/collage/gpt2", "/usr/share/collage/gpt2"]:
        d = pathlib.Path(d)
        if (d / "encoder.json").is_file() and (d / "vocab.bpe").is_file():
            return d
    pytest.skip("GPT-2's vocabulary (encoder.json, vocab.bpe) is not installed: scripts/gpt2-vocab.sh installs it")


@pytest.fixture(scope="module")
def hf_gpt2(tmp_path_factory):
    """transformers' GPT-2 tokenizer (its fast one: the Rust tokenizers BPE with the ByteLevel
    pre-tokenizer) made offline from collage's vocabulary files: encoder.json is what Hugging Face names
    vocab.json and vocab.bpe its merges.txt, the same files under other names."""
    src = gpt2_vocab_dir()
    d = tmp_path_factory.mktemp("gpt2-tokenizer")
    (d / "vocab.json").symlink_to(src / "encoder.json")
    (d / "merges.txt").symlink_to(src / "vocab.bpe")
    tok = transformers.GPT2TokenizerFast.from_pretrained(d)
    assert tok.is_fast and len(tok) == 50257 and tok.eos_token_id == 50256
    return tok


def collage_tokenize(tmp_path, src=None):
    """`collage tokenize --tokenizer gpt2` of src (None: the default corpus, the English fortunes), read back
    from its llm.c shard (a 1024-byte header of int32: magic 20240520, version 1, the token count, the
    vocabulary size; then the tokens as little-endian uint16); returns (ids, the command's stdout)."""
    out = tmp_path / "tokens.bin"
    r = collage_cli("tokenize", "--tokenizer", "gpt2", "--vocab-dir", gpt2_vocab_dir(), "--out", out,
                    *(["--in", src] if src else []))
    raw = out.read_bytes()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    assert list(header[:4]) == [20240520, 1, (len(raw) - 1024) // 2, 50257] and not header[4:].any(), header[:4]
    return np.frombuffer(raw[1024:], dtype="<u2").astype(np.int64).tolist(), r.stdout


def assert_same_ids(got, want, tok, where):
    """Equal id lists; else the first position where they part, with the tokens around it."""
    if got == want:
        return
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    pieces = lambda ids: tok.convert_ids_to_tokens(ids[max(0, i - 3): i + 4])  # noqa: E731
    pytest.fail(f"{where}: {len(got)} ids from collage, {len(want)} from transformers; first difference at {i}: "
                f"collage {pieces(got)}, transformers {pieces(want)}")


def fortune_text(raw):
    """A fortune file as collage's corpus reader gives it: each line that is only '%' (the separator
    between fortunes) becomes an empty line."""
    return b"".join(b"\n" if line in (b"%\n", b"%") else line for line in raw.splitlines(keepends=True))


def test_gpt2_tokenizer_ids_equal_transformers_on_the_fortunes(tmp_path, hf_gpt2):
    """The whole default corpus: collage encodes each English fortune file by itself and joins the ids in
    file-name order, with nothing between files; transformers' tokenizer, given each file's text the same
    way, gives the same ids."""
    folder = pathlib.Path("/usr/share/games/fortunes")
    if not folder.is_dir():
        pytest.skip("no fortunes corpus here (Debian's package 'fortunes')")
    got, said = collage_tokenize(tmp_path)
    # the corpus's files: plain files without a '.' in the name (art, not art.dat or the art.u8 link)
    files = sorted((f for f in folder.iterdir() if "." not in f.name and f.is_file() and not f.is_symlink()),
                   key=lambda f: os.fsencode(f.name))
    texts = [fortune_text(f.read_bytes()) for f in files]
    assert f"{sum(map(len, texts))} bytes in {len(files)} files" in said, said
    want = [i for t in texts for i in hf_gpt2(t.decode("utf-8"))["input_ids"]]
    assert len(got) > 100_000
    assert_same_ids(got, want, hf_gpt2, "the fortunes")


UNUSUAL = "".join([
    "\ufeffA byte-order mark first. ",
    "Combining marks: e\u0301 a\u0308\u0323 Z\u0351\u0334\u0315a\u0337\u0358l\u0335g\u0361o\u0327 n\u0303\u0303\u0303.\n",
    "Emoji: \U0001F469\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 \U0001F3F3\uFE0F\u200D\U0001F308 "
    "\U0001F44D\U0001F3FD \U0001F1EF\U0001F1F5\U0001F1EB\U0001F1F7 \u2764\ufe0f\U0001F525x\U0001F600\U0001F600\n",
    "CJK: 日本語のテキスト、中文，한국어 漢字かなカナ｡ ＦＵＬＬＷＩＤＴＨ １２３\n",
    "RTL: مرحبا بالعالم ١٢٣ שָׁלוֹם \u200fעולם\u200e \u202eevil\u202c فارسی ۴۵۶\n",
    "Astral: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐍈𐌰 𝟘𝟙𝟚 🀄 𠀀𠀁 𓀀 \U0001D11E\n",
    "Indic and Thai: नमस्ते ਸਤਿ ਸ੍ਰੀ สวัสดีครับ\n",
    "Windows lines\r\nend\r\n\r\n",
    "\ttabs\t\tand\t \tmixed \t\n",
    "spaces:" + " " * 40 + "then text,   three,  two\n",
    "Unicode spaces:\u00a0nbsp\u3000ideographic\u2009thin\u2028line sep\u0085next line\u200bzero-width\n",
    "Numbers: 3.14159 1,000,000 -42 1e-10 0x1F 2024-11-29 ⅷ Ⅻ ²³ ½ ٣ 12345678901234567890\n",
    "Contractions: it's don't we're I've I'm you'll he'd they'RE IT'S 'tis rock'n'roll o'clock it’s\n",
    "Punctuation runs: ...!!!??? --- *** ((( ))) <<>> @#$%^&* ''' \"\"\" `code` ~~ \\\\ //\n",
    "Replacement char \ufffd and a private-use char \ue000 and a tag character \U000E0041 (plane 14).\n",
    "Ends in spaces and a newline   \n   ",
])


def test_gpt2_tokenizer_ids_equal_transformers_on_unusual_unicode(tmp_path, hf_gpt2):
    """A file of unusual but valid UTF-8 (combining marks, ZWJ emoji, CJK, right-to-left text with its
    controls, astral characters, \\r\\n, tabs, long runs of spaces, Unicode spaces, numbers, contractions):
    collage's ids are transformers'. Each line alone too, so a difference points at its line."""
    path = tmp_path / "unusual.txt"
    path.write_bytes(UNUSUAL.encode("utf-8"))
    got, _ = collage_tokenize(tmp_path, path)
    assert_same_ids(got, hf_gpt2(UNUSUAL)["input_ids"], hf_gpt2, "the unusual file")
    for k, line in enumerate(UNUSUAL.splitlines(keepends=True)):
        path.write_bytes(line.encode("utf-8"))
        assert_same_ids(collage_tokenize(tmp_path, path)[0], hf_gpt2(line)["input_ids"], hf_gpt2, f"line {k}: {line!r}")
    # '<|endoftext|>' written in the text is text to collage; transformers makes it the special token
    # unless told to split special tokens
    path.write_bytes(b"one<|endoftext|>two")
    got, _ = collage_tokenize(tmp_path, path)
    assert_same_ids(got, hf_gpt2("one<|endoftext|>two", split_special_tokens=True)["input_ids"], hf_gpt2, "eot text")
    assert 50256 not in got and hf_gpt2("one<|endoftext|>two")["input_ids"].count(50256) == 1


def byte_decoder():
    """GPT-2's bytes_to_unicode() inverted: the vocabulary's characters → the bytes they stand for."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def test_gpt2_tokenizer_on_invalid_utf8(tmp_path, hf_gpt2):
    """Bytes that are not UTF-8 (a stray continuation byte, 0xff, a cut sequence, an overlong form, an
    encoded surrogate, a code point past U+10FFFF). collage takes them: each invalid byte is a character
    of its own, of the punctuation class, and its ids give back the file's bytes exactly. transformers'
    tokenizer takes text only, so the bytes must be decoded first; decoded with errors="replace" each
    invalid sequence is U+FFFD, whose ids both sides agree on, and transformers' decoding of collage's
    ids is that same text."""
    raw = (b"caf\xc3\xa9 \x80stray \xff\xfe ok \xc3 cut, overlong \xc0\xaf, surrogate \xed\xa0\x80, "
           b"past U+10FFFF \xf4\x90\x80\x80, a\xffb and the end \xe2\x82")
    path = tmp_path / "invalid.txt"
    path.write_bytes(raw)
    got, _ = collage_tokenize(tmp_path, path)
    dec = byte_decoder()
    assert bytes(dec[c] for t in hf_gpt2.convert_ids_to_tokens(got) for c in t) == raw
    text = raw.decode("utf-8", errors="replace")
    assert hf_gpt2.decode(got) == text
    path.write_bytes(text.encode("utf-8"))
    assert_same_ids(collage_tokenize(tmp_path, path)[0], hf_gpt2(text)["input_ids"], hf_gpt2, "U+FFFD in place")


# ---------------------------------------------------------------- python -m collage.compare beside collage compare
def table_head(report):
    return [line for line in report.splitlines() if line.startswith("| strategy |")]


@pytest.mark.parametrize("model", ["gpt2", "bert"])
def test_python_compare_writes_collage_compares_report(tmp_path, model):
    """python -m collage.compare and `collage compare` over the same small grid: the same results.csv header
    and rows (strategy, β2, seed), the same table columns in report.md; the runs of a seed start from the
    same weights and batches (bf16 and bf16-master hold the same bf16 weights: equal first losses), each
    run's bytes per parameter is its strategy's, and a rerun keeps the finished runs."""
    if not os.path.isdir("/usr/share/games/fortunes"):
        pytest.skip("no fortunes corpus here (Debian's package 'fortunes'): both grids train on it")
    grid = ["--precision", "bf16,bf16-master", "--beta2", "0.95", "--steps", "4", "--batch", "2", "--seq", "16",
            "--threads", "1"]
    collage_cli("compare", *grid, "--jobs", "1", "--out", tmp_path / "c",
                *(["--model", "bert-tiny"] if model == "bert" else []))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    r = subprocess.run([sys.executable, "-m", "collage.compare", "--model", model, *grid, "--out", str(tmp_path / "p")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    import csv
    c_rows, p_rows = (list(csv.DictReader(open(tmp_path / d / "results.csv"))) for d in ("c", "p"))
    assert (tmp_path / "p" / "results.csv").read_text().splitlines()[0] == \
        (tmp_path / "c" / "results.csv").read_text().splitlines()[0]
    key = lambda rows: sorted((x["strategy"], float(x["beta2"]), x["seed"], x["steps"]) for x in rows)  # noqa: E731
    assert key(p_rows) == key(c_rows) and len(p_rows) == 2
    for x in p_rows:
        assert float(x["bytes_per_param"]) == collage.strategy(x["strategy"]).bytes_per_param
        assert all(np.isfinite(float(x[k])) for k in ("train_loss", "val_loss", "edq_ratio", "lost")), x
        assert (x["val_accuracy"] == "") == (model == "gpt2"), x
    c_rep, p_rep = ((tmp_path / d / "report.md").read_text() for d in ("c", "p"))
    assert table_head(p_rep) == table_head(c_rep) and len(table_head(p_rep)) == 1, (table_head(p_rep), table_head(c_rep))
    assert "| bf16-master | " in p_rep and "(reference)" in p_rep and "**bf16** " in p_rep
    # the report is collage compare's own (--report-only over the python runs): its other sections and
    # plots, and about.md's account of how the runs were made
    for part in ("## The frontier: bytes against quality", "## Does EDQ predict the loss?", "## Plots",
                 "python -m collage.compare", "BertForMaskedLM" if model == "bert" else "GPT2LMHeadModel"):
        assert part in p_rep, part
    if shutil.which("gnuplot"):
        for png in ("val_loss.png", "edq.png", "loss_vs_bytes.png", "frontier.png"):
            assert (tmp_path / "p" / png).read_bytes()[:4] == b"\x89PNG", png
    for d in ("bf16-b0.95-s1", "bf16-master-b0.95-s1"):  # collage compare's folders; a validation every step
        for which in ("c", "p"):
            assert len((tmp_path / which / "runs" / d / "val.dat").read_text().splitlines()) == 4, (which, d)
    runs = sorted((tmp_path / "p" / "runs").glob("*/summary.json"))
    import json
    first = {json.loads(f.read_text())["strategy"]: json.loads(f.read_text())["losses"][0] for f in runs}
    assert first["bf16"] == first["bf16-master"], first
    stamps = [f.stat().st_mtime_ns for f in runs]
    r = subprocess.run([sys.executable, "-m", "collage.compare", "--model", model, *grid, "--out", str(tmp_path / "p")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0 and [f.stat().st_mtime_ns for f in runs] == stamps, r.stderr
