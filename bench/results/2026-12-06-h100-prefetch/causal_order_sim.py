# Static round-robin of causal query tiles over 132 persistent blocks: which heads are in flight?
import heapq
SMS, HEADS, MT = 132, 256, 32          # 8x32 heads, 4096/128 query tiles
F, S = 2.0, 1.77                        # us per tile start, per key step (bench/NOTES.md fit)
def order(group):
    tiles = []
    for t in range(HEADS * MT):
        g = min(group, HEADS)
        per = g * MT
        grp, within = divmod(t, per)
        heads = min(g, HEADS - grp * g)
        mt = MT - 1 - within // heads
        h = grp * g + within % heads
        tiles.append((h, mt))
    return tiles
def simulate(tiles):
    events = []  # (start, end, head)
    for sm in range(SMS):
        t = 0.0
        for k in range(sm, len(tiles), SMS):
            h, mt = tiles[k]
            d = F + (mt + 1) * S
            events.append((t, t + d, h)); t += d
    end = max(e for _, e, _ in events)
    # sample the distinct heads in flight
    samples = []
    for x in range(1, 200):
        tt = end * x / 200
        samples.append(len({h for s, e, h in events if s <= tt < e}))
    return end, max(samples), sum(samples) / len(samples)
for g in (2, 4, 8):
    end, mx, avg = simulate(order(g))
    print(f"groups of {g}: makespan {end/1000:.2f} ms, heads in flight max {mx}, mean {avg:.1f} -> K/V working set ~{avg*2:.0f} MB (L2 50 MB)")
def paired():
    pairs = [(h, j) for h in range(HEADS) for j in range(MT // 2)]
    tiles = []
    for w in range(0, len(pairs), SMS):
        wave = pairs[w:w + SMS]
        tiles += [(h, MT - 1 - j) for h, j in wave]   # the long ones, one per block
        tiles += [(h, j) for h, j in wave]            # then each block's complement
        # (a short last wave: its blocks' complements follow in the same positions)
    return tiles
def simulate_positions(tiles):
    # blocks take positions in turn within each wave of `2*SMS` (long then short on the same block)
    return simulate(tiles)
end, mx, avg = simulate(paired())
print(f"paired longest+shortest: makespan {end/1000:.2f} ms, heads in flight max {mx}, mean {avg:.1f} -> ~{avg*2:.0f} MB")
