"""Per-block SASS instruction counts of the 8-bit kernel's consumer loop (v10, dev/NOTES_8bit.md): the dynamic path of
one steady-state key block (not block 0, not the tail; for the lazy reference also: no redo), per warp, with the
opcode histogram, from `cuobjdump -sass` of a cubin (dev/q8_lazy_ptxas.cu builds one; cuobjdump from the pip wheel
nvidia-cuda-cuobjdump). The loop is the backward branch whose body holds both IGMMA and QGMMA; every combination of
its forward conditional branches is walked (wait-retry branches, which leave the loop, are taken as not taken), and a
path is classified by what it contains: steady = 4 IGMMA, 4 QGMMA, no tail masks (SEL / FSEL with -INF < 8); the lazy
build's fast path additionally has the BAR.RED vote and no VIMNMX3 (no row max); its redo path 8 IGMMA.

    python3 dev/q8_sass_count.py /tmp/q8_lazy.sass
"""
import collections
import itertools
import re
import sys


def functions(path):
    funcs, name = {}, None
    for line in open(path):
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            funcs[name] = {}
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and name:
            funcs[name][int(m.group(1), 16)] = m.group(2).strip()
    return funcs


BRA = re.compile(r"(@!?U?P\w+\s+)?BRA(?:\.\w+)*\s+(?:\w+,\s*)?0x([0-9a-f]+)")


def opcode(t):
    return (t.split()[1] if t.startswith("@") else t.split()[0]).split(".")[0]


def loop_of(ins):
    for a in sorted(ins):
        m = BRA.match(ins[a])
        if m and m.group(1) and int(m.group(2), 16) < a:
            top = int(m.group(2), 16)
            body = [ins[x] for x in ins if top <= x <= a]
            if any("IGMMA" in t for t in body) and any("QGMMA" in t for t in body):
                return top, a
    return None


def walk(ins, top, end, taken):
    a, out = top, []
    while a <= end and len(out) < 20000:
        t = ins[a]
        out.append(t)
        m = BRA.match(t)
        if m and (not m.group(1) or a in taken):
            tgt = int(m.group(2), 16)
            if top < tgt <= end or not m.group(1):
                if not (top <= tgt <= end + 16) and not m.group(1):
                    break
                a = tgt
                continue
        if a == end:
            break
        a += 16
    return out


def paths(ins):
    top, end = loop_of(ins)
    conds = [a for a in sorted(ins) if top <= a < end and BRA.match(ins[a]) and BRA.match(ins[a]).group(1)
             and top < int(BRA.match(ins[a]).group(2), 16) <= end]
    seen = {}
    for bits in itertools.product((False, True), repeat=len(conds)):
        p = walk(ins, top, end, {a for a, b in zip(conds, bits) if b})
        seen[tuple(p)] = p
    return list(seen.values())


def classify(p):
    h = collections.Counter(opcode(t) for t in p)
    masks = sum(1 for t in p if opcode(t) == "SEL" or ("FSEL" in t and "-INF" in t))
    # (QGMMA 8: v13's row-sum product, 4 m64n8k32 beside P V's 4, rides in the S group)
    if h["IGMMA"] == 4 and h["QGMMA"] in (4, 8) and masks < 8:
        if "BAR.RED" in " ".join(p):
            return "fast" if h["VIMNMX3"] == 0 else None
        return "steady" if h["VIMNMX3"] > 0 else None
    if h["IGMMA"] == 8 and h["QGMMA"] == 4 and masks < 8:
        return "redo"
    return None


def main(path):
    rows = {}
    for name, ins in functions(path).items():
        if "q8_fwd_kernel" not in name or loop_of(ins) is None:
            continue
        best = {}
        for p in paths(ins):
            c = classify(p)
            if c and (c not in best or len(p) < len(best[c])):
                best[c] = p
        tag = re.sub(r".*q8_fwd_kernelI(.*)EEvNS0_11Q8FwdParamsE", r"\1", name)
        for c, p in best.items():
            rows[f"{tag} {c}"] = collections.Counter(opcode(t) for t in p)
    names = list(rows)
    ops = sorted(set().union(*rows.values()), key=lambda o: -max(r[o] for r in rows.values()))
    print("per warp and steady key block (kernel template args abridged: ...<kLazy>, <kDescInc>)")
    print(f"{'':10s}" + "".join(f"{n[-28:]:>30s}" for n in names))
    print(f"{'total':10s}" + "".join(f"{sum(rows[n].values()):30d}" for n in names))
    for o in ops:
        v = [rows[n][o] for n in names]
        if len(set(v)) > 1:
            print(f"{o:10s}" + "".join(f"{x:30d}" for x in v))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/q8_lazy.sass")
