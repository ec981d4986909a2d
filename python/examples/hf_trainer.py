"""Train a tiny Hugging Face GPT2LMHeadModel with transformers.Trainer and collage.torch.AdamW, pure
16-bit: the model itself in bf16 (model.to(torch.bfloat16)), no autocast (Trainer's bf16=True would keep
fp32 weights and autocast the forward), the optimizer handed to Trainer with its scheduler. Trainer saves
checkpoints every --save-steps; --resume continues from one of them, bit for bit as the unbroken run.

    python python/examples/hf_trainer.py --out /tmp/hf-run [--steps 8] [--save-steps 4] [--resume CHECKPOINT]

Needs transformers and accelerate (python/torch2-pin.txt). Text: the fortunes (Debian's `fortunes`) as
bytes where present, else seeded random bytes.
"""

import argparse
import glob
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import collage.torch as ct  # noqa: E402

CTX = 16


def dataset(n=32, folder="/usr/share/games/fortunes"):
    """n sequences of CTX byte tokens: Trainer's default collator stacks the dicts into a batch."""
    files = sorted(f for f in glob.glob(os.path.join(folder, "*")) if "." not in os.path.basename(f))
    data = b"".join(open(f, "rb").read() for f in files[:1])[: n * CTX]
    if len(data) < n * CTX:
        data = bytes(torch.randint(0, 256, (n * CTX,), generator=torch.Generator().manual_seed(0)).tolist())
    x = torch.tensor(list(data), dtype=torch.long).view(n, CTX)
    return [dict(input_ids=r, labels=r) for r in x]


def model(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=256, n_positions=CTX, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg).to(torch.bfloat16)  # pure 16-bit: the weights themselves bf16


def adamw(params):
    return ct.AdamW(params, precision="collage-light", lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1,
                    max_grad_norm=1.0)  # clipping by the library, on the fp32 norm of the bf16 gradients


def run(out, steps=8, save_steps=4, resume=None, optimizer=adamw, make_model=model, data=None):
    """Trains a fresh make_model() (or resumes it from the checkpoint folder resume) on data (a list of
    dicts of model inputs; default: dataset()) with optimizer(named parameters) (collage.torch.AdamW, Lion
    or SGD); returns the trainer. A resumed run must build the same model and data as the run it continues."""
    m = make_model()
    opt = optimizer(m.named_parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=steps, save_steps=save_steps, per_device_train_batch_size=4,
        max_grad_norm=0.0,  # Trainer's own clipping off: the optimizer clips
        bf16=False,  # no autocast: the model is bf16 already
        use_cpu=True, seed=0, logging_steps=1, report_to="none", disable_tqdm=True, dataloader_num_workers=0)
    trainer = transformers.Trainer(model=m, args=args, train_dataset=dataset() if data is None else data,
                                   optimizers=(opt, sched))
    trainer.train(resume_from_checkpoint=resume)
    return trainer


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="Trainer's output folder (checkpoint-N folders go there)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--save-steps", type=int, default=4)
    ap.add_argument("--resume", help="a checkpoint-N folder of an earlier run to continue from")
    a = ap.parse_args()
    if a.resume and not os.path.isdir(a.resume):
        sys.exit(f"hf_trainer: --resume '{a.resume}' is not a folder (a checkpoint-N folder that Trainer wrote)")
    torch.set_num_threads(1)
    tr = run(a.out, a.steps, a.save_steps, a.resume)
    for rec in tr.state.log_history:
        if "loss" in rec:
            print(f"step {rec['step']}: loss {rec['loss']:.4f}")
