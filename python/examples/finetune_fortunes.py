"""Fine-tune a small character-level model on the fortunes (Debian's `fortunes` package) with bf16
parameters, twice from the same start: with torch.optim.AdamW, and with collage.torch.AdamW. Prints,
for each, the lost-update fraction (weights whose gradient was nonzero but whose bf16 value did not move,
over the run: for torch those updates are gone, for a collage strategy they are carried in its
compensation word until they add up to a step of θ) and the final training and held-out loss. The start is a short fp32 pre-training, cast to
bf16 by collage.torch.to_collage (which keeps the fp32 values in θ + δθ for collage's run).

    /usr/bin/python3 python/examples/finetune_fortunes.py [--steps 400] [--precision collage-light]
"""

import argparse
import copy
import glob
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import collage.torch as ct  # noqa: E402

CTX, EMB, HID, BATCH = 16, 32, 256, 64


def corpus(folder="/usr/share/games/fortunes"):
    files = sorted(f for f in glob.glob(os.path.join(folder, "*")) if "." not in os.path.basename(f))
    if not files:
        sys.exit(f"no fortunes in {folder}: apt-get install fortunes")
    data = b"".join(open(f, "rb").read() for f in files)
    t = torch.tensor(list(data), dtype=torch.long)
    cut = int(0.95 * len(t))
    return t[:cut], t[cut:]


class CharMLP(torch.nn.Module):
    """The next byte from the CTX bytes before it: embedding, one hidden layer, logits."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(256, EMB)
        self.hidden = torch.nn.Linear(CTX * EMB, HID)
        self.norm = torch.nn.LayerNorm(HID)
        self.out = torch.nn.Linear(HID, 256)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.hidden(self.emb(x).flatten(1)))
        return self.out(self.norm(h))


def batch(data, gen, n=BATCH):
    i = torch.randint(0, len(data) - CTX - 1, (n,), generator=gen)
    x = torch.stack([data[j:j + CTX] for j in i])
    return x, data[i + CTX]


def loss_of(model, x, y):
    return torch.nn.functional.cross_entropy(model(x).float(), y)


@torch.no_grad()
def held_out(model, data, batches=20):
    gen = torch.Generator().manual_seed(99)
    return sum(float(loss_of(model, *batch(data, gen, 256))) for _ in range(batches)) / batches


def train(model, opt, data, steps, lr, seed):
    """steps of cosine-decayed lr; returns the mean loss of the last 50 steps and the lost fraction."""
    gen = torch.Generator().manual_seed(seed)
    lost = moved_or_lost = 0
    losses = []
    for t in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t / steps)))
        x, y = batch(data, gen)
        loss = loss_of(model, x, y)
        opt.zero_grad()
        loss.backward()
        before = [p.detach().clone() for p in model.parameters()]
        opt.step()
        for p, b in zip(model.parameters(), before):
            live = p.grad != 0
            lost += int((live & (p.detach() == b)).sum())
            moved_or_lost += int(live.sum())
        losses.append(float(loss))
    return sum(losses[-50:]) / 50, lost / max(moved_or_lost, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--pretrain", type=int, default=300)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--precision", default="collage-light")
    a = ap.parse_args()
    torch.manual_seed(0)
    tr, va = corpus()
    base = CharMLP()
    opt = torch.optim.AdamW(base.parameters(), lr=3e-3, weight_decay=0.1)
    gen = torch.Generator().manual_seed(1)
    for _ in range(a.pretrain):  # the fp32 model we fine-tune
        x, y = batch(tr, gen)
        opt.zero_grad()
        loss_of(base, x, y).backward()
        opt.step()
    print(f"start: fp32 model after {a.pretrain} steps, held-out loss {held_out(base, va):.4f}; "
          f"fine-tuning {a.steps} steps in bf16, lr {a.lr} cosine to {a.lr / 10}")

    m1 = copy.deepcopy(base).to(torch.bfloat16)
    o1 = torch.optim.AdamW(m1.parameters(), lr=a.lr, weight_decay=0.1)
    tl1, lost1 = train(m1, o1, tr, a.steps, a.lr, seed=2)
    print(f"  torch.optim.AdamW, bf16 parameters     lost updates {lost1:6.1%}   "
          f"final loss {tl1:.4f}   held-out {held_out(m1, va):.4f}")

    m2 = ct.to_collage(copy.deepcopy(base), a.precision)
    o2 = ct.AdamW(m2.named_parameters(), precision=a.precision, lr=a.lr, weight_decay=0.1, edq=True)
    tl2, lost2 = train(m2, o2, tr, a.steps, a.lr, seed=2)
    print(f"  collage.torch.AdamW ({a.precision})  lost updates {lost2:6.1%}   "
          f"final loss {tl2:.4f}   held-out {held_out(m2, va):.4f}   "
          f"(last step: EDQ lost {o2.last_stats['edq']['lost']:.1%}, carried in "
          f"{o2.strategy.keeps_update_in or 'nothing'})")


if __name__ == "__main__":
    main()
