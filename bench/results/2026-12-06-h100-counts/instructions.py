# Model instructions per element (tilefuse plan --json, this tree's build-bundle/tilefuse) beside
# Nsight Compute's executed instructions per element (ncu_sweep.csv, one launch per example).
import csv, json, os, subprocess, collections, sys
rows = collections.defaultdict(dict)
for r in csv.reader(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ncu_sweep.csv'))):
    if len(r) < 16 or r[1] == 'ID': continue
    case, kname, metric, val = r[0], r[5], r[13], r[15]
    rows[(case, kname)][metric] = float(val.replace(',', ''))
out = []
for (case, kname), m in rows.items():
    plan = json.loads(subprocess.run(['build-bundle/tilefuse', 'plan', case, '--json'], capture_output=True, text=True).stdout)
    k = [k for k in plan['kernels'] if k['name'] == kname]
    if not k: continue
    k = k[0]
    elems = 1
    for d in k['domain']: elems *= d
    thr = m.get('smsp__thread_inst_executed.sum', 0); warp = m.get('smsp__inst_executed.sum', 0)
    mem = (k['bytes_read'] + k['bytes_written']) 
    out.append((case, kname, elems, k['instructions'] / elems, thr / elems, warp * 32 / elems, m.get('smsp__issue_active.avg.pct_of_peak_sustained_active', 0), k['schedule'], (m.get('dram__bytes_read.sum',0)+m.get('dram__bytes_write.sum',0))/mem))
out.sort(key=lambda x: -x[5] / max(x[3], 1e-9))
print(f"{'case':34} {'kernel':38} {'model/el':>8} {'thr/el':>7} {'warp32/el':>9} {'warp/model':>10} {'issue%':>6} {'dram/model':>9}")
for o in out:
    print(f"{o[0]:34} {o[1][-38:]:38} {o[3]:8.1f} {o[4]:7.1f} {o[5]:9.1f} {o[5]/max(o[3],1e-9):10.2f} {o[6]:6.1f} {o[8]:9.2f}")
