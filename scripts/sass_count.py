#!/usr/bin/env python3
"""sass_count.py — the CUDA step's machine instructions an element, counted without a GPU.

Compiles src/cuda/adamw.cu for sm_90 (H100, H200) to a cubin with the Makefile's numerics flags,
disassembles it and counts, for each preset's kernel, the instructions of the plain step's 8-element
loop on its usual path: the blocks of the cycle through its first 16-byte store (both copies, with and
without clipping, where the compiler made two, over the elements of both: the copies share their loads,
so a step runs a few more an element than printed), less the IEEE quotient's fallback blocks (taken only
for quotients or divisors outside the fast quotient's range). Printed per element: all instructions, the
conversions to 16 bits (F2F: the slow conversion unit, XU; F2FP: the fast 16-bit converter), the
multi-function unit's (MUFU: square root, reciprocal) and the XU's share.

The disassembler is nvdisasm from Debian 12's nvidia-cuda-toolkit (CUDA 11.8, non-free), which reads
sm_90 code; CUDA 13's cubins carry their architecture in a newer ELF header layout, which this script
rewrites to the older one in its copy of the cubin (the code is unchanged).

  python3 scripts/sass_count.py --fetch        (once: the .deb into .tools/apt, nvdisasm into .tools/nvdisasm)
  python3 scripts/sass_count.py [--keep DIR]   (the table; --keep: the cubin and its disassembly in DIR)
"""
import argparse
import collections
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, ".tools", "nvdisasm")
NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
NUMERICS = ["--fmad=false", "-ftz=false", "-prec-div=true", "-prec-sqrt=true"]  # the Makefile's NVCC_NUMERICS
# preset kernels: step_kernel<0, W, M, V, 0, V1>'s template arguments (collage.h's enums)
KERNELS = [("bf16", (1, 1, 1, 0)), ("collage-light", (2, 1, 1, 0)), ("bf16-sr", (3, 1, 1, 0)),
           ("collage-plus", (2, 1, 2, 0)), ("bf16-master", (6, 0, 0, 0))]


def fetch():
    """nvidia-cuda-toolkit's .deb from Debian 12's non-free archive; nvdisasm out of it."""
    work = os.path.join(ROOT, ".tools", "apt")
    for d in ("lists/partial", "cache/archives/partial"):
        os.makedirs(os.path.join(work, d), exist_ok=True)
    src = os.path.join(work, "sources.list")
    with open(src, "w") as f:
        f.write("deb http://deb.debian.org/debian bookworm main contrib non-free\n")
    opts = ["-o", "Dir::Etc::SourceList=" + src, "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", "Dir::State::Lists=" + work + "/lists", "-o", "Dir::Cache=" + work + "/cache"]
    subprocess.run(["apt-get"] + opts + ["update"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get"] + opts + ["download", "nvidia-cuda-toolkit"], check=True, cwd=work)
    deb = [f for f in os.listdir(work) if f.startswith("nvidia-cuda-toolkit_") and f.endswith(".deb")][0]
    with tempfile.TemporaryDirectory() as x:
        subprocess.run(["dpkg-deb", "-x", os.path.join(work, deb), x], check=True)
        os.makedirs(TOOL, exist_ok=True)
        shutil.copy(os.path.join(x, "usr/bin/nvdisasm"), os.path.join(TOOL, "nvdisasm"))
    print("nvdisasm in", TOOL)


def disassemble(out):
    cubin = os.path.join(out, "adamw.cubin")
    subprocess.run([NVCC, "-std=c++17", "-O2", "-lineinfo"] + NUMERICS +
                   ["-gencode", "arch=compute_90,code=sm_90", "-Iinclude", "-Isrc/optim", "-cubin", "-o", cubin,
                    "src/cuda/adamw.cu"], check=True, cwd=ROOT)
    b = bytearray(open(cubin, "rb").read())
    if b[8] == 8:  # CUDA 13's layout (ABI version 8, the architecture in bits 8-15): to ABI 7's for nvdisasm 11.8
        arch = (struct.unpack_from("<I", b, 0x30)[0] >> 8) & 0xff
        b[8] = 7
        struct.pack_into("<I", b, 0x30, arch | 0x500 | (arch << 16))
    old = os.path.join(out, "adamw-abi7.cubin")
    open(old, "wb").write(b)
    sass = subprocess.run([os.path.join(TOOL, "nvdisasm"), "-c", old], check=True, capture_output=True,
                          text=True).stdout
    open(os.path.join(out, "adamw.sass"), "w").write(sass)
    return sass.split("\n")


def blocks_of(f):
    """The basic blocks of a function's disassembly: (label, instructions, successors' labels)."""
    blocks, cur, label = [], [], None
    for l in f:
        m = re.match(r"^(\.L_x_\d+):", l)
        if m:
            if cur or label:
                blocks.append([label, cur])
            label, cur = m.group(1), []
            continue
        ins = re.search(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", l)
        if not ins:
            continue
        cur.append(ins.group(1))
        if re.search(r"\b(BRA|EXIT|RET|CALL)\b", ins.group(1)) and "CALL" not in ins.group(1):
            blocks.append([label, cur])
            label, cur = None, []
    if cur:
        blocks.append([label, cur])
    out = []
    for i, (lab, ins) in enumerate(blocks):
        succ = set()
        last = ins[-1] if ins else ""
        t = re.search(r"`\((\.L_x_\d+)\)", last)
        if t:
            succ.add(t.group(1))
        uncond = re.match(r"^(BRA|EXIT|RET)", last) is not None
        if not uncond and i + 1 < len(blocks):
            succ.add(("#", i + 1))
        out.append((lab, ins, succ))
    return out


def loop_counts(lines, targs):
    """The instruction mix of step_kernel<0, W, M, V, 0, V1>'s 8-element loop (the blocks of the cycle
    through its first 16-byte store) on its usual path, and the number of elements it covers (its square
    roots)."""
    w, m, v, v1 = targs
    mangled = "step_kernelILi0ELi%dELi%dELi%dELi0ELi%dEEv" % (w, m, v, v1)
    start = next(i for i, l in enumerate(lines) if l.startswith("//---") and mangled in l)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("//---")), len(lines))
    B = blocks_of(lines[start:end])
    index = {lab: i for i, (lab, _, _) in enumerate(B) if lab}
    succ = [{index[x] if isinstance(x, str) else x[1] for x in s if not isinstance(x, str) or x in index}
            for _, _, s in B]
    pred = [set() for _ in B]
    for i, s in enumerate(succ):
        for j in s:
            pred[j].add(i)
    first = next(i for i, (_, ins, _) in enumerate(B) if any(re.search(r"\bSTG?\.E\.128\b", x) for x in ins))

    def reach(i0, edges):
        seen, todo = {i0}, [i0]
        while todo:
            for j in edges[todo.pop()]:
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
        return seen
    loop = sorted(reach(first, succ) & reach(first, pred))
    # cold: the slow paths' calls; in the 16-bit lines the IEEE quotient's blocks too (the fast quotient's
    # fallback: from the block with FCHK to its BSYNC B4, and its rounding)
    cold = {i for i in loop if any(x.startswith("CALL") for x in B[i][1])}
    for i in loop:
        if w != 6 and any(x.startswith("FCHK") for x in B[i][1]):
            j = i
            while j < len(B) and not any(x.startswith("BSYNC B4") for x in B[j][1]):
                cold.add(j)
                j += 1
            cold.add(j)
            if j + 1 < len(B) and len(B[j + 1][1]) == 1 and B[j + 1][1][0].startswith("F2FP"):
                cold.add(j + 1)
    ops = collections.Counter()
    for i in loop:
        if i in cold:
            continue
        for x in B[i][1]:
            op = re.match(r"^(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", x)
            if op:
                ops[op.group(2)] += 1
    return ops, sum(v for k, v in ops.items() if k in ("MUFU.SQRT", "MUFU.RSQ"))  # one square root an element


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fetch", action="store_true", help="download nvdisasm (Debian non-free) into .tools/nvdisasm")
    ap.add_argument("--keep", metavar="DIR", help="keep the cubin and its disassembly in DIR")
    a = ap.parse_args()
    if a.fetch:
        return fetch()
    if not os.path.exists(os.path.join(TOOL, "nvdisasm")):
        sys.exit("sass_count.py: no %s/nvdisasm; run python3 scripts/sass_count.py --fetch first" % TOOL)
    out = a.keep or tempfile.mkdtemp()
    os.makedirs(out, exist_ok=True)
    lines = disassemble(out)
    print("%-14s %8s %6s %6s %6s %8s" % ("kernel", "instr/el", "F2F", "F2FP", "MUFU", "XU/el"))
    for name, targs in KERNELS:
        ops, n = loop_counts(lines, targs)
        tot = sum(ops.values())
        f2f = sum(v for k, v in ops.items() if k.startswith("F2F."))
        f2fp = sum(v for k, v in ops.items() if k.startswith("F2FP"))
        mufu = sum(v for k, v in ops.items() if k.startswith("MUFU"))
        print("%-14s %8.1f %6.1f %6.1f %6.1f %8.1f" % (name, tot / n, f2f / n, f2fp / n, mufu / n, (f2f + mufu) / n))
    if not a.keep:
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
