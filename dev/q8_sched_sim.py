"""A toy model of the 8-bit kernel's consumer schedule on one SM, for the written prediction of a schedule change
(dev/NOTES_8bit.md v8) before it is measured. Not a measurement and not calibrated beyond the constants below.

Three consumer warpgroups, each looping S -> row max -> exponentials -> pack -> P V -> merge. The tensor cores are one
FIFO server (S and P V of one 64-row warpgroup over one 128-key block: 256 clocks each at D=128, 128 at D=64, at
4096 8-bit MACs per clock and SM); MUFU is shared by the warps in their exponentials phase (processor sharing: 66
MUFU.EX2 per warp and block, 8 clocks each per SMSP); everything else is a fixed delay per phase (issue contention is
not modelled). Schedules: 1 (free), 2 (round-robin turns around the S issue), 3 (round-robin turns around the
exponentials). Prints clocks per cycle of three blocks, the tensor and MUFU busy fractions, and the ratio to
schedule 1.

    python3 dev/q8_sched_sim.py [--d 128] [--max-phase 150] [--merge 90]
"""
import argparse


def simulate(sched, d=128, blocks=400, max_phase=150.0, pack=40.0, merge=90.0, lat=40.0, exp_work=528.0,
             exp_issue=0.0, dt=1.0):
    gemm = 256.0 if d == 128 else 128.0
    n = 3
    # per warpgroup state: phase name, remaining, block count
    st = [{"ph": "want_s", "rem": 0.0, "blk": 0} for _ in range(n)]
    tq = []          # tensor FIFO: [wg, remaining]
    turn = 0         # whose turn (schedules 2 and 3)
    t = 0.0
    busy_t = busy_m = 0.0
    start_at = None
    done_at = None
    while True:
        # dispatch state transitions that need no time
        changed = True
        while changed:
            changed = False
            for w, s in enumerate(st):
                if s["ph"] == "want_s":
                    if sched == 2 and turn != w:
                        continue
                    tq.append([w, gemm])
                    s["ph"] = "wait_s"
                    if sched == 2:
                        turn = (turn + 1) % n
                    changed = True
                elif s["ph"] == "want_exp":
                    if sched == 3 and turn != w:
                        continue
                    s["ph"], s["rem"] = "exp", exp_work
                    changed = True
                elif s["ph"] == "want_pv":
                    tq.append([w, gemm])
                    s["ph"] = "wait_pv"
                    changed = True
        # advance dt
        if tq:
            tq[0][1] -= dt
            busy_t += dt
            if tq[0][1] <= 0:
                w, _ = tq.pop(0)
                s = st[w]
                s["ph"], s["rem"] = ("lat_s", lat) if s["ph"] == "wait_s" else ("lat_pv", lat)
        in_exp = [s for s in st if s["ph"] == "exp"]
        if in_exp:
            busy_m += dt
            for s in in_exp:
                s["rem"] -= dt / len(in_exp)
        for w, s in enumerate(st):
            if s["ph"] in ("lat_s", "max", "pack", "lat_pv", "merge"):
                s["rem"] -= dt
            if s["ph"] == "exp" and s["rem"] <= 0:
                s["ph"], s["rem"] = "pack", pack + exp_issue
                if sched == 3:
                    turn = (turn + 1) % n
            elif s["rem"] <= 0 and s["ph"] in ("lat_s", "max", "pack", "lat_pv", "merge"):
                nxt = {"lat_s": ("max", max_phase), "max": ("want_exp", 0.0), "pack": ("want_pv", 0.0),
                       "lat_pv": ("merge", merge), "merge": ("want_s", 0.0)}[s["ph"]]
                s["ph"], s["rem"] = nxt
                if nxt[0] == "want_s":
                    s["blk"] += 1
        t += dt
        total = sum(s["blk"] for s in st)
        if start_at is None and total >= 30:
            start_at, t0, bt0, bm0 = total, t, busy_t, busy_m
        if start_at is not None and total >= start_at + 3 * blocks:
            cyc = (t - t0) / blocks
            return cyc, (busy_t - bt0) / (t - t0), (busy_m - bm0) / (t - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--max-phase", type=float, default=150.0)
    ap.add_argument("--merge", type=float, default=90.0)
    ap.add_argument("--pack", type=float, default=40.0)
    ap.add_argument("--lat", type=float, default=40.0)
    a = ap.parse_args()
    base = None
    for sched in (1, 2, 3):
        cyc, ut, um = simulate(sched, a.d, max_phase=a.max_phase, pack=a.pack, merge=a.merge, lat=a.lat)
        base = base or cyc
        print(f"D={a.d} schedule {sched}: {cyc:6.0f} clocks per 3 blocks, tensor {ut:4.0%}, MUFU {um:4.0%}, "
              f"speed {base / cyc:.3f}x schedule 1")


if __name__ == "__main__":
    main()
