"""`collage export` / collage.export: model.safetensors and config.json in GPT2LMHeadModel's layout, read
back by an independent reader (json + numpy, written here from the safetensors layout) against the
checkpoint read as llm.c lays it out; a GPT-2 forward in torch over the exported names gives the
library's logits; collage.torch.load gives the same tensors. LLaMA in LlamaForCausalLM's layout: that
class's forward in torch gives the library's logits."""

import ctypes
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest
import torch

import collage
import collage.torch as ct
from collage import _lib

L = _lib.lib
L.collage_model_preset.argtypes = [ctypes.c_char_p, ctypes.POINTER(_lib.ModelConfig)]
L.collage_model_config_set_vocab.argtypes = [ctypes.POINTER(_lib.ModelConfig), ctypes.c_int]
L.collage_model_config_set_vocab.restype = None
L.collage_model_save_file.argtypes = [ctypes.c_char_p, ctypes.POINTER(_lib.ModelConfig), ctypes.c_void_p, ctypes.c_int,
                                      ctypes.c_char_p, ctypes.c_size_t]
L.collage_model_create.argtypes = [ctypes.POINTER(_lib.ModelConfig), ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                   ctypes.POINTER(ctypes.c_void_p)]
L.collage_model_next_logits.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
L.collage_model_free.argtypes = [ctypes.c_void_p]
L.collage_model_free.restype = None

VOCAB = 200  # padded to 256 rows in the checkpoint: the export drops the padding rows


def checkpoint(path, bf16, seed=11):
    """A tiny GPT-2 checkpoint (llm.c format) with every weight random (biases and norms included)."""
    cfg = _lib.ModelConfig()
    _lib.check(L.collage_model_preset(b"tiny", ctypes.byref(cfg)), "preset")
    L.collage_model_config_set_vocab(ctypes.byref(cfg), VOCAB)
    n = L.collage_model_num_params(ctypes.byref(cfg))
    w = (np.random.default_rng(seed).standard_normal(n) * 0.1).astype(np.float32)
    data = torch.from_numpy(w).to(torch.bfloat16).view(torch.int16).numpy() if bf16 else w
    err = ctypes.create_string_buffer(512)
    _lib.check(L.collage_model_save_file(str(path).encode(), ctypes.byref(cfg), data.ctypes.data, int(bf16), err, 512),
               "save", err.value)
    return cfg


# ---------------------------------------------------------------- the independent reader
def read_safetensors(path):
    raw = pathlib.Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert (8 + n) % 8 == 0, "the data section starts at a multiple of 8"
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    meta = header.pop("__metadata__")
    spans = sorted(tuple(e["data_offsets"]) for e in header.values())
    assert spans[0][0] == 0 and spans[-1][1] == len(body), "the tensors cover the data section"
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "no gap, no overlap"
    np_dtype = {"F32": np.dtype("<f4"), "BF16": np.dtype("<u2")}
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        out[name] = (e["dtype"], np.frombuffer(body[a:b], dtype=np_dtype[e["dtype"]]).reshape(e["shape"]))
    return out, meta, list(header)


def llmc_tensors(path):
    """The checkpoint as llm.c lays it out: a 256-int32 header, then the 16 tensors in order."""
    raw = pathlib.Path(path).read_bytes()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    T, V, Lyr, NH, C, Vp = (int(h[i]) for i in (2, 3, 4, 5, 6, 7))
    dt = np.dtype("<u2") if h[1] == 5 else np.dtype("<f4")
    w = np.frombuffer(raw[1024:], dtype=dt)
    shapes = [("wte", (Vp, C)), ("wpe", (T, C)), ("ln1w", (Lyr, C)), ("ln1b", (Lyr, C)), ("qkvw", (Lyr, 3 * C, C)),
              ("qkvb", (Lyr, 3 * C)), ("attprojw", (Lyr, C, C)), ("attprojb", (Lyr, C)), ("ln2w", (Lyr, C)),
              ("ln2b", (Lyr, C)), ("fcw", (Lyr, 4 * C, C)), ("fcb", (Lyr, 4 * C)), ("fcprojw", (Lyr, C, 4 * C)),
              ("fcprojb", (Lyr, C)), ("lnfw", (C,)), ("lnfb", (C,))]
    out, at = {}, 0
    for name, sh in shapes:
        k = int(np.prod(sh))
        out[name] = w[at:at + k].reshape(sh)
        at += k
    assert at == w.size
    return out, dict(T=T, V=V, L=Lyr, NH=NH, C=C, Vp=Vp, bf16=h[1] == 5)


def expected_hf(path):
    """GPT2LMHeadModel's state dict from the llm.c tensors: Conv1D weights transposed to (in, out)."""
    t, c = llmc_tensors(path)
    out = {"transformer.wte.weight": t["wte"][:c["V"]], "transformer.wpe.weight": t["wpe"]}
    for i in range(c["L"]):
        p = f"transformer.h.{i}."
        out.update({p + "ln_1.weight": t["ln1w"][i], p + "ln_1.bias": t["ln1b"][i],
                    p + "attn.c_attn.weight": t["qkvw"][i].T, p + "attn.c_attn.bias": t["qkvb"][i],
                    p + "attn.c_proj.weight": t["attprojw"][i].T, p + "attn.c_proj.bias": t["attprojb"][i],
                    p + "ln_2.weight": t["ln2w"][i], p + "ln_2.bias": t["ln2b"][i],
                    p + "mlp.c_fc.weight": t["fcw"][i].T, p + "mlp.c_fc.bias": t["fcb"][i],
                    p + "mlp.c_proj.weight": t["fcprojw"][i].T, p + "mlp.c_proj.bias": t["fcprojb"][i]})
    out.update({"transformer.ln_f.weight": t["lnfw"], "transformer.ln_f.bias": t["lnfb"]})
    return out, c


@pytest.mark.parametrize("bf16", [False, True])
def test_safetensors_read_independently(tmp_path, bf16):
    ck = tmp_path / "model.bin"
    checkpoint(ck, bf16)
    collage.export(tmp_path, tmp_path / "hf")  # a folder holding model.bin
    got, meta, order = read_safetensors(tmp_path / "hf" / "model.safetensors")
    want, c = expected_hf(ck)
    assert meta["format"] == "pt"
    assert order == list(want), "GPT2LMHeadModel's names, in its state_dict order"
    for name, arr in want.items():
        dtype, a = got[name]
        assert dtype == ("BF16" if bf16 else "F32"), name
        assert a.shape == arr.shape, f"{name}: {a.shape} vs {arr.shape}"
        assert np.array_equal(a, arr), f"{name}: values"
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert cfg["architectures"] == ["GPT2LMHeadModel"] and cfg["model_type"] == "gpt2"
    assert (cfg["vocab_size"], cfg["n_positions"], cfg["n_embd"], cfg["n_layer"], cfg["n_head"]) == \
        (c["V"], c["T"], c["C"], c["L"], c["NH"])
    assert cfg["torch_dtype"] == ("bfloat16" if bf16 else "float32") and cfg["activation_function"] == "gelu_new"


def gpt2_forward(sd, cfg, tokens):
    """GPT2LMHeadModel's forward over its state dict (no dropout): next-token logits at every position."""
    F = torch.nn.functional
    T, C, NH = len(tokens), cfg["n_embd"], cfg["n_head"]
    x = sd["transformer.wte.weight"][tokens] + sd["transformer.wpe.weight"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(cfg["n_layer"]):
        p = lambda k: sd[f"transformer.h.{i}.{k}"]  # noqa: E731
        h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), cfg["layer_norm_epsilon"])
        q, k, v = (h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")).split(C, dim=-1)
        q, k, v = (z.view(T, NH, C // NH).transpose(0, 1) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / (C // NH) ** 0.5
        y = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1) @ v
        x = x + y.transpose(0, 1).reshape(T, C) @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), cfg["layer_norm_epsilon"])
        h = F.gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"], cfg["layer_norm_epsilon"])
    return x @ sd["transformer.wte.weight"].T


def assert_next_logits(ck, cfg, tokens, logits):
    """collage's next-token logits of the model file ck after tokens[:T], for a few T, equal logits[T - 1]
    (another program's forward over the export) to fp32 rounding."""
    params = np.empty(L.collage_model_num_params(ctypes.byref(cfg)), dtype=np.float32)
    err = ctypes.create_string_buffer(512)
    _lib.check(L.collage_model_load_file(str(ck).encode(), ctypes.byref(cfg), params.ctypes.data, 0, err, 512), "load")
    m = ctypes.c_void_p()
    _lib.check(L.collage_model_create(ctypes.byref(cfg), 0, 1, len(tokens), ctypes.byref(m)), "create")
    try:
        want = np.empty(VOCAB, dtype=np.float32)
        for T in (1, 17, len(tokens)):
            _lib.check(L.collage_model_next_logits(m, params.ctypes.data, tokens.ctypes.data, T, want.ctypes.data),
                       "logits")
            got = logits[T - 1].numpy()
            assert got.shape == want.shape
            assert np.allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max()), \
                f"T={T}: max |diff| {np.abs(got - want).max()}"
    finally:
        L.collage_model_free(m)


def test_exported_model_runs_in_torch_as_in_collage(tmp_path):
    """The exported names and orientations mean what GPT2LMHeadModel means by them: its forward in torch
    gives collage's own next-token logits (to fp32 rounding)."""
    ck = tmp_path / "model.bin"
    cfg = checkpoint(ck, bf16=False)
    collage.export(ck, tmp_path / "hf")
    sd = ct.load(tmp_path / "hf")
    hf = json.loads((tmp_path / "hf" / "config.json").read_text())
    tokens = np.random.default_rng(3).integers(0, VOCAB, 40).astype(np.int32)
    assert_next_logits(ck, cfg, tokens, gpt2_forward(sd, hf, torch.from_numpy(tokens).long()))


def test_load_of_a_checkpoint_and_of_an_export(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    checkpoint(ck / "model.bin", bf16=True)
    direct = ct.load(ck)  # exported on the way
    collage.export(ck, tmp_path / "hf", dtype="fp32")
    as_f32 = ct.load(tmp_path / "hf")
    assert list(direct) == list(as_f32)
    for k in direct:
        assert direct[k].dtype == torch.bfloat16 and as_f32[k].dtype == torch.float32
        assert torch.equal(direct[k].float(), as_f32[k]), k  # bf16 → fp32 is exact
    assert ct.load(tmp_path / "hf" / "model.safetensors").keys() == direct.keys()


def test_command_line(tmp_path):
    exe = os.environ.get("COLLAGE_BIN") or str(pathlib.Path(__file__).resolve().parents[2] / "build" / "collage")
    if not os.path.exists(exe):
        pytest.skip(f"no collage command at {exe}")
    checkpoint(tmp_path / "model.bin", bf16=True)
    r = subprocess.run([exe, "export", "--checkpoint", str(tmp_path), "--format", "safetensors", "--out",
                        str(tmp_path / "cli" / "deep")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    collage.export(tmp_path, tmp_path / "py")
    for f in ("model.safetensors", "config.json"):
        assert (tmp_path / "cli" / "deep" / f).read_bytes() == (tmp_path / "py" / f).read_bytes(), f
    r = subprocess.run([exe, "export", "--checkpoint", str(tmp_path / "missing"), "--out", str(tmp_path / "x")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and f"cannot open '{tmp_path}/missing'" in r.stderr and "hint:" in r.stderr
    r = subprocess.run([exe, "export", "--checkpoint", str(tmp_path), "--out", str(tmp_path / "x"), "--format", "onnx"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "unknown --format 'onnx'" in r.stderr
    assert not (tmp_path / "x").exists(), "nothing written for a refused command"


def test_model_config_mirrors_the_header():
    """_lib.ModelConfig is collage_model_config field for field: a preset of every family read through it
    has its fields in place, and the bytes after the struct stay untouched (a shorter mirror would let the
    library write past it)."""
    buf = ctypes.create_string_buffer(ctypes.sizeof(_lib.ModelConfig) + 64)
    ctypes.memset(buf, 0x5A, len(buf))
    cfg = _lib.ModelConfig.from_buffer(buf)
    assert L.collage_model_preset(b"llama-tiny", ctypes.byref(cfg)) == 0
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.channels, cfg.hidden_dim) == (2, 4, 2, 128, 352)
    assert cfg.norm_eps == pytest.approx(1e-5) and cfg.rope_theta == 10000.0
    assert buf.raw[ctypes.sizeof(_lib.ModelConfig):] == b"\x5a" * 64
    assert L.collage_model_preset(b"gpt2", ctypes.byref(cfg)) == 0
    assert (cfg.num_layers, cfg.channels, cfg.padded_vocab_size, cfg.num_kv_heads) == (12, 768, 50304, 0)


# ---------------------------------------------------------------- LLaMA (LlamaForCausalLM)
def llama_checkpoint(path, untied, seed=5):
    """A tiny LLaMA checkpoint (llama2.c format) with grouped-query attention (4 heads on 2 key/value heads),
    every weight random (norms included), the vocabulary padded in memory (200 in 256 rows)."""
    cfg = _lib.ModelConfig()
    _lib.check(L.collage_model_preset(b"llama-tiny", ctypes.byref(cfg)), "preset")
    L.collage_model_config_set_vocab(ctypes.byref(cfg), VOCAB)
    cfg.untied = int(untied)
    assert (cfg.num_heads, cfg.num_kv_heads) == (4, 2)
    n = L.collage_model_num_params(ctypes.byref(cfg))
    w = (np.random.default_rng(seed).standard_normal(n) * 0.1).astype(np.float32)
    err = ctypes.create_string_buffer(512)
    _lib.check(L.collage_model_save_file(str(path).encode(), ctypes.byref(cfg), w.ctypes.data, 0, err, 512), "save",
               err.value)
    return cfg


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def llama_forward(sd, cfg, tokens):
    """LlamaForCausalLM's forward over its state dict, written from that class's definition: RMSNorm, the
    rotary embedding on halves (rotate_half, cos/sin of cat(freqs, freqs)), key/value heads repeated for
    grouped-query attention (query head h on key/value head h // (heads / kv heads)), SiLU-gated MLP."""
    T, C, NH, KV = len(tokens), cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hs, eps = C // NH, cfg["rms_norm_eps"]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().float(), emb.sin().float()
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = sd["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = lambda k: sd[f"model.layers.{i}.{k}"]  # noqa: E731
        h = rms_norm(x, p("input_layernorm.weight"), eps)
        q = (h @ p("self_attn.q_proj.weight").T).view(T, NH, hs).transpose(0, 1)
        k = (h @ p("self_attn.k_proj.weight").T).view(T, KV, hs).transpose(0, 1)
        v = (h @ p("self_attn.v_proj.weight").T).view(T, KV, hs).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(NH // KV, dim=0), v.repeat_interleave(NH // KV, dim=0)
        att = (q @ k.transpose(-1, -2)) / hs ** 0.5
        y = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1) @ v
        x = x + y.transpose(0, 1).reshape(T, C) @ p("self_attn.o_proj.weight").T
        h = rms_norm(x, p("post_attention_layernorm.weight"), eps)
        g = torch.nn.functional.silu(h @ p("mlp.gate_proj.weight").T) * (h @ p("mlp.up_proj.weight").T)
        x = x + g @ p("mlp.down_proj.weight").T
    x = rms_norm(x, sd["model.norm.weight"], eps)
    out = sd["lm_head.weight"] if not cfg["tie_word_embeddings"] else sd["model.embed_tokens.weight"]
    return x @ out.T


@pytest.mark.parametrize("untied", [False, True])
def test_llama_export_runs_in_torch_as_in_collage(tmp_path, untied):
    """The exported LLaMA means what LlamaForCausalLM means: names and shapes of that class (q, k, v, gate,
    up apart; lm_head only when untied), a config it reads, and its forward in torch (rotation of halves)
    gives collage's own next-token logits (rotation of adjacent pairs) to fp32 rounding."""
    ck = tmp_path / "model.bin"
    cfg = llama_checkpoint(ck, untied)
    collage.export(ck, tmp_path / "hf")
    got, meta, order = read_safetensors(tmp_path / "hf" / "model.safetensors")
    hf = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf["architectures"] == ["LlamaForCausalLM"] and hf["model_type"] == "llama"
    assert (hf["vocab_size"], hf["hidden_size"], hf["intermediate_size"], hf["num_hidden_layers"],
            hf["num_attention_heads"], hf["num_key_value_heads"], hf["max_position_embeddings"]) == \
        (VOCAB, cfg.channels, cfg.hidden_dim, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.max_seq_len)
    assert hf["tie_word_embeddings"] == (not untied) and hf["rms_norm_eps"] == cfg.norm_eps
    C, hs, H = cfg.channels, cfg.channels // cfg.num_heads, cfg.hidden_dim
    shapes = {"model.embed_tokens.weight": [VOCAB, C], "model.norm.weight": [C]}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": [C, C], p + "self_attn.k_proj.weight": [2 * hs, C],
                       p + "self_attn.v_proj.weight": [2 * hs, C], p + "self_attn.o_proj.weight": [C, C],
                       p + "mlp.gate_proj.weight": [H, C], p + "mlp.up_proj.weight": [H, C],
                       p + "mlp.down_proj.weight": [C, H], p + "input_layernorm.weight": [C],
                       p + "post_attention_layernorm.weight": [C]})
    if untied:
        shapes["lm_head.weight"] = [VOCAB, C]
    assert sorted(order) == sorted(shapes)
    assert order[0] == "model.embed_tokens.weight" and order[-1] == ("lm_head.weight" if untied else "model.norm.weight")
    for name, sh in shapes.items():
        assert list(got[name][1].shape) == sh, name
    sd = ct.load(tmp_path / "hf")
    tokens = np.random.default_rng(4).integers(0, VOCAB, 40).astype(np.int32)
    assert_next_logits(ck, cfg, tokens, llama_forward(sd, hf, torch.from_numpy(tokens).long()))


# ---------------------------------------------------------------- BERT (BertForMaskedLM)
L.collage_model_logits_at.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                      ctypes.c_int, ctypes.c_void_p]


def bert_forward(sd, cfg, tokens):
    """BertForMaskedLM's forward over its state dict, written from that class's definition (no padding,
    token type 0, no dropout): embeddings summed and normalised, post-norm blocks (self-attention over the
    whole sequence, then the MLP), the prediction head's transform, the decoder tied to the word
    embeddings plus cls.predictions.bias. hidden_act "gelu_new" is GELU's tanh form."""
    F = torch.nn.functional
    T, C, NH, eps = len(tokens), cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    hs = C // NH
    ln = lambda x, p: F.layer_norm(x, (C,), sd[p + ".weight"], sd[p + ".bias"], eps)  # noqa: E731
    lin = lambda x, p: x @ sd[p + ".weight"].T + sd[p + ".bias"]  # noqa: E731
    e = "bert.embeddings."
    x = sd[e + "word_embeddings.weight"][tokens] + sd[e + "position_embeddings.weight"][:T] + \
        sd[e + "token_type_embeddings.weight"][0]
    x = ln(x, e + "LayerNorm")
    for i in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{i}."
        q, k, v = (lin(x, p + "attention.self." + n).view(T, NH, hs).transpose(0, 1) for n in ("query", "key", "value"))
        y = torch.softmax((q @ k.transpose(-1, -2)) / hs ** 0.5, dim=-1) @ v
        x = ln(lin(y.transpose(0, 1).reshape(T, C), p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        h = F.gelu(lin(x, p + "intermediate.dense"), approximate="tanh")
        x = ln(lin(h, p + "output.dense") + x, p + "output.LayerNorm")
    t = ln(F.gelu(lin(x, "cls.predictions.transform.dense"), approximate="tanh"), "cls.predictions.transform.LayerNorm")
    return t @ sd[e + "word_embeddings.weight"].T + sd["cls.predictions.bias"]


def test_bert_export_runs_in_torch_as_in_collage(tmp_path):
    """The exported BERT means what BertForMaskedLM means: that class's names and shapes (query, key, value
    apart; no decoder weight: tied), a config it reads, and its forward in torch gives collage's own
    masked-LM logits (to fp32 rounding) at every position asked."""
    cfg = _lib.ModelConfig()
    _lib.check(L.collage_model_preset(b"bert-tiny", ctypes.byref(cfg)), "preset")
    L.collage_model_config_set_vocab(ctypes.byref(cfg), VOCAB)  # VOCAB tokens and the mask: 201 in 256 rows
    V, C = cfg.vocab_size, cfg.channels
    n = L.collage_model_num_params(ctypes.byref(cfg))
    w = (np.random.default_rng(9).standard_normal(n) * 0.1).astype(np.float32)
    ck, err = tmp_path / "model.bin", ctypes.create_string_buffer(512)
    _lib.check(L.collage_model_save_file(str(ck).encode(), ctypes.byref(cfg), w.ctypes.data, 0, err, 512), "save",
               err.value)
    collage.export(ck, tmp_path / "hf")
    got, meta, order = read_safetensors(tmp_path / "hf" / "model.safetensors")
    hf = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf["architectures"] == ["BertForMaskedLM"] and hf["model_type"] == "bert" and hf["hidden_act"] == "gelu_new"
    assert (hf["vocab_size"], hf["hidden_size"], hf["num_hidden_layers"], hf["num_attention_heads"],
            hf["intermediate_size"], hf["max_position_embeddings"], hf["type_vocab_size"]) == \
        (V, C, cfg.num_layers, cfg.num_heads, 4 * C, cfg.max_seq_len, 1)
    assert order[0] == "bert.embeddings.word_embeddings.weight" and order[-1] == "cls.predictions.transform.LayerNorm.bias"
    assert list(got["bert.embeddings.word_embeddings.weight"][1].shape) == [V, C]
    assert list(got["cls.predictions.bias"][1].shape) == [V]
    for n_ in ("query", "key", "value"):
        assert list(got[f"bert.encoder.layer.1.attention.self.{n_}.weight"][1].shape) == [C, C]
        assert list(got[f"bert.encoder.layer.1.attention.self.{n_}.bias"][1].shape) == [C]
    assert not any("decoder" in k for k in order)
    sd = ct.load(tmp_path / "hf")
    tokens = np.random.default_rng(2).integers(0, V, 48).astype(np.int32)
    tokens[[3, 20]] = V - 1  # the mask token
    logits = bert_forward(sd, hf, torch.from_numpy(tokens).long())
    pos = np.array([0, 3, 20, 47], dtype=np.int32)
    m = ctypes.c_void_p()
    _lib.check(L.collage_model_create(ctypes.byref(cfg), 0, 1, len(tokens), ctypes.byref(m)), "create")
    try:
        want = np.empty((len(pos), V), dtype=np.float32)
        _lib.check(L.collage_model_logits_at(m, w.ctypes.data, tokens.ctypes.data, len(tokens), pos.ctypes.data, len(pos),
                                             want.ctypes.data), "logits_at")
        got_p = logits[pos].numpy()
        assert np.allclose(got_p, want, rtol=1e-4, atol=1e-4 * np.abs(want).max()), \
            f"max |diff| {np.abs(got_p - want).max()}"
    finally:
        L.collage_model_free(m)
