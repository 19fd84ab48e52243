#!/usr/bin/env python3
"""One-edit mutants of a kernel source (CUDA or WGSL), for mutation
campaigns against the gates (device/NOTES.md: "Lavapipe L1", "Emulator
E2", "Emulator M1", runs 126 and 129).

    scripts/mutgen.py SRC OUTDIR N SEED

finds every site of the edits below in SRC's code (comments and
#include/#pragma/#if lines skipped), samples N of them with Python's
random.Random(SEED) (all of them when N is larger), and writes each
mutant as OUTDIR/mNN.<ext> plus OUTDIR/manifest.tsv (file, line, edit).
The edits are the kinds real kernels get wrong:
  - a relational operator flipped at its boundary (< and <=, > and >=),
    == and != swapped;
  - + for - and - for + (binary, between operands);
  - a `+ 1` or `- 1` dropped;
  - && for || and || for &&;
  - min for max and max for min;
  - a barrier removed (__syncthreads(), __syncwarp(), workgroupBarrier()).
Score them with `kernel-oracle score KIND --bug none --also OUTDIR/m*.cu
--no-fuzz` (or, with no GPU, `scripts/emu-score gdn|moe-tables OUTDIR/m*.cu`:
the host emulators, KERNEL_ORACLE_*_CU naming each; rows by argument
order, so two OUTDIRs' mNN files stay apart).
`scripts/ptx-equiv BUILTIN OUTDIR/m*.cu` first sets aside those whose PTX
is the builtin's (equivalent under this compiler; CPU only).
Each survivor is to be read: equivalent, dead under every launch the shim
makes, or a gap of the gate."""

import random
import re
import sys
from pathlib import Path

EDITS = [
    # Comparisons are written with a space either side (clang-format);
    # template brackets and shifts are not.
    (re.compile(r"(?<= )<=(?= )"), "<"),
    (re.compile(r"(?<= )<(?= )"), "<="),
    (re.compile(r"(?<= )>=(?= )"), ">"),
    (re.compile(r"(?<= )>(?= )"), ">="),
    (re.compile(r"=="), "!="),
    (re.compile(r"!="), "=="),
    (re.compile(r"(?<=[\w)\]] )\+(?= [\w(])"), "-"),
    (re.compile(r"(?<=[\w)\]] )-(?= [\w(])"), "+"),
    (re.compile(r" [+-] 1(?![\w.])"), ""),
    (re.compile(r"&&"), "||"),
    (re.compile(r"\|\|"), "&&"),
    (re.compile(r"\bmin\("), "max("),
    (re.compile(r"\bmax\("), "min("),
    (re.compile(r"\b(__syncthreads|__syncwarp|workgroupBarrier)\(\);"), ""),
]


def code_mask(src):
    """A copy of `src` with comments and skipped directive lines blanked
    (same length, so offsets carry over)."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    text = "".join(out)
    lines = text.split("\n")
    for li, line in enumerate(lines):
        if re.match(r"\s*#\s*(include|pragma|if|ifdef|ifndef|elif|else|endif|error)\b", line):
            lines[li] = " " * len(line)
    return "\n".join(lines)


def sites(src):
    masked = code_mask(src)
    found = []
    for pat, rep in EDITS:
        for m in pat.finditer(masked):
            found.append((m.start(), m.end(), rep))
    found.sort()
    return found


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    src_path, outdir, n, seed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    src = src_path.read_text()
    every = sites(src)
    picked = sorted(random.Random(seed).sample(every, min(n, len(every))))
    outdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (a, b, rep) in enumerate(picked):
        mutant = src[:a] + rep + src[b:]
        name = f"m{i:02d}{src_path.suffix}"
        (outdir / name).write_text(mutant)
        line = src.count("\n", 0, a) + 1
        rows.append(f"{name}\t{line}\t{src[a:b]!r} -> {rep!r}\t{src.splitlines()[line - 1].strip()[:120]}")
    (outdir / "manifest.tsv").write_text("\n".join(rows) + "\n")
    print(f"{src_path}: {len(every)} sites, {len(picked)} mutants in {outdir}")


if __name__ == "__main__":
    main()
