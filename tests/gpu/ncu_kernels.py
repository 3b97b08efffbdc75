#!/usr/bin/env python3
# ncu_kernels.py: the per-kernel table of one profiled decode step, from the CSV that
# `BENCH_NCU=1 ncu --profile-from-start off --metrics gpu__time_duration.sum --csv
# bench_cuda_engine ...` writes (one eager step, then one graph step): calls, us in all and us a
# call per kernel and grid, largest first, for the graph step (or the eager one), and the sum.
# Usage: ncu_kernels.py CSV [eager|graph (default)] [ROWS (default 24)] [--order]
#   --order: the step's kernels in launch order instead (name, grid, stream, us).
import csv
import re
import sys
from collections import defaultdict


def kernel_rows(path):
    """The rows of ncu's CSV with a duration, in launch order."""
    header, rows = None, []
    with open(path, newline='') as f:
        for r in csv.reader(f):
            if r and r[0] == 'ID':
                header = r
            elif header and len(r) == len(header):
                d = dict(zip(header, r))
                if d.get('Metric Name') == 'gpu__time_duration.sum':
                    rows.append(d)
    return rows


def short(name):
    """A kernel's name without its parameter list and anonymous namespace."""
    return re.sub(r'\(.*', '', name).replace('<unnamed>::', '').strip()


def us(d):
    value = float(d['Metric Value'].replace(',', ''))
    unit = d.get('Metric Unit', 'ns')
    return value / 1000.0 if unit == 'ns' else value if unit == 'us' else value * 1000.0


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    if not args:
        sys.exit('usage: ncu_kernels.py CSV [eager|graph] [ROWS] [--order]')
    try:
        rows = kernel_rows(args[0])
    except OSError as e:
        sys.exit(f'ncu_kernels.py: cannot read {args[0]}: {e.strerror}')
    if not rows or len(rows) % 2:
        sys.exit(f'ncu_kernels.py: {args[0]}: expected the kernels of two steps, found {len(rows)}')
    which = args[1] if len(args) > 1 else 'graph'
    if which not in ('eager', 'graph'):
        sys.exit(f'ncu_kernels.py: the step is eager or graph, not {which}')
    limit = int(args[2]) if len(args) > 2 else 24
    half = len(rows) // 2
    step = rows[:half] if which == 'eager' else rows[half:]
    total = sum(us(d) for d in step)
    print(f'{which} step: {len(step)} kernels, {total:.1f} us summed (side-stream kernels included)')
    if '--order' in sys.argv:
        for d in step:
            print(f"  {short(d['Kernel Name'])[:48]:48} grid {d['Grid Size']:14} stream "
                  f"{d['Stream']:>4} {us(d):8.1f} us")
        return
    agg = defaultdict(lambda: [0, 0.0])
    for d in step:
        key = f"{short(d['Kernel Name'])} grid {d['Grid Size']}"
        agg[key][0] += 1
        agg[key][1] += us(d)
    for key, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:limit]:
        print(f'  {key[:60]:60} {n:3d} calls {t:8.1f} us {t / n:7.1f} us/call {100 * t / total:5.1f}%')


if __name__ == '__main__':
    try:
        main()
    except BrokenPipeError:  # (the table piped into head)
        sys.exit(0)
