# Measured/predicted on the H200 family (056bf7c) if the arithmetic term were the executed
# instructions (H100 Nsight Compute counts, card-independent) and memory and issue combined as a
# p-norm, p = 2, 3, 4, 6, or summed; run from the repository root.
import csv, json, subprocess, collections, re, math
rows = collections.defaultdict(dict)
for r in csv.reader(open('bench/results/2026-12-06-h100-counts/ncu_sweep.csv')):
    if len(r) < 16 or r[1] == 'ID': continue
    rows[(r[0], r[5])][r[13]] = float(r[15].replace(',', ''))
meas = {}
for l in open('bench/results/2026-12-06-h200-056bf7c/family.md'):
    f = [x.strip() for x in l.split('|')]
    if len(f) > 6 and f[4] == 'tilefuse': meas[f[1]] = (float(f[5]), float(f[6]))
data = []
for case, (t, pred) in meas.items():
    txt = subprocess.run(['build-bundle/tilefuse', 'plan', case], capture_output=True, text=True).stdout
    ks = re.findall(r'^  (\S+_k\d+)  .*?predicted ([\d.]+) ms \((\S+)-bound: memory ([\d.]+) ms, arithmetic ([\d.]+) ms\)', txt, re.S | re.M)
    if len(ks) != 1 or (case, ks[0][0]) not in rows: continue
    k, p, bound, M, A = ks[0]
    m = rows[(case, k)]
    C = m['smsp__inst_executed.sum'] * 32 / 33.4e12 * 1e3
    Ct = m['smsp__thread_inst_executed.sum'] / 33.4e12 * 1e3
    data.append((case, t, float(p), float(M), float(A), C, Ct))
print(f"{'case':30} {'meas':>7} {'pred':>7} {'M':>7} {'A':>7} {'Cwarp':>7} {'m/p':>5} " + ' '.join(f'p{q:>4}' for q in (2,3,4,6)) + '  sum')
for (case, t, p, M, A, C, Ct) in sorted(data, key=lambda d: -d[1]/d[2]):
    extra = p - max(M, A)   # launch and row steps
    fits = [ (M**q + C**q)**(1/q) + extra for q in (2,3,4,6)]
    print(f"{case:30} {t:7.4f} {p:7.4f} {M:7.4f} {A:7.4f} {C:7.4f} {t/p:5.2f} " + ' '.join(f'{t/f:5.2f}' for f in fits) + f' {t/(M+C+extra):5.2f}')
