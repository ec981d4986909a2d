"""End to end on a GPU: a GPT-2-small-sized model in torch (12 layers, 768 wide, 12 heads, GPT-2's vocabulary,
124M parameters) in bf16, trained for --steps steps on the bytes of this repository's docs as tokens, once
with collage.torch.AdamW (collage-light through libcollage_cuda) and once with torch.optim.AdamW on the same
bf16 parameters, from the same start and batches; the losses and ms per step of both, as JSON.

    COLLAGE_LIB=build/libcollage.so python3 python/bench/e2e_gpt2.py [--steps 200] [--json FILE]
"""

import argparse
import glob
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import collage.torch as ct  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.c_attn, self.c_proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.c_fc, self.mlp_proj = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)
        self.H = H

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, V=50257, T=1024, C=768, L=12, H=12):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(V, C), torch.nn.Embedding(T, C)
        self.h = torch.nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = torch.nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() > 1:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()


def corpus(dev):
    root = os.path.join(HERE, "..", "..")
    data = b"".join(open(f, "rb").read() for f in sorted(glob.glob(os.path.join(root, "docs", "*.md"))))
    return torch.tensor(list(data), dtype=torch.long, device=dev)


def train(opt_name, steps, batch, seq, dev, tokens, start):
    torch.manual_seed(0)
    model = GPT().to(dev)
    model.load_state_dict(start)
    model = model.to(torch.bfloat16)
    groups = [dict(params=[p for p in model.parameters() if p.dim() > 1], weight_decay=0.1),
              dict(params=[p for p in model.parameters() if p.dim() <= 1], weight_decay=0.0)]
    if opt_name == "collage-light":
        opt = ct.AdamW(groups, precision="collage-light", lr=6e-4, betas=(0.9, 0.95), max_grad_norm=1.0)
    else:
        opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95))
    g = torch.Generator(device="cpu").manual_seed(1)
    losses, t_opt = [], 0.0
    for step in range(steps):
        ix = torch.randint(0, tokens.numel() - seq - 1, (batch,), generator=g).to(dev)
        x = torch.stack([tokens[i:i + seq] for i in ix])
        y = torch.stack([tokens[i + 1:i + 1 + seq] for i in ix])
        loss = F.cross_entropy(model(x).float().view(-1, 50257), y.view(-1))
        loss.backward()
        torch.cuda.synchronize()
        t0 = time.perf_counter()  # the optimizer's time: clipping by the global norm and the step
        if opt_name != "collage-light":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch.cuda.synchronize()
        t_opt += time.perf_counter() - t0
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return {"optimizer": opt_name, "losses": losses, "first": losses[0], "last10": sum(losses[-10:]) / 10,
            "optimizer_ms_per_step": 1e3 * t_opt / steps, "finite": all(math.isfinite(v) for v in losses)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("skip: no CUDA device")
        return 77
    dev = torch.device("cuda")
    tokens = corpus(dev)
    torch.manual_seed(0)
    start = GPT().state_dict()
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "steps": a.steps, "batch": a.batch,
           "seq": a.seq, "tokens": tokens.numel(), "runs": []}
    for name in ("collage-light", "torch.optim.AdamW bf16"):
        r = train(name, a.steps, a.batch, a.seq, dev, tokens, start)
        print(f"{name:24s} loss {r['first']:.3f} -> {r['last10']:.3f} (last 10), optimizer {r['optimizer_ms_per_step']:.2f} ms/step")
        out["runs"].append(r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if all(r["finite"] for r in out["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
