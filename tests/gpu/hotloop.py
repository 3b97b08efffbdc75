#!/usr/bin/env python3
# hotloop.py: instruction counts of a CUDA kernel's innermost loops that hold tensor-core ops,
# from PTX (nvcc -ptx) or SASS (cuobjdump -sass) text: per loop, instructions, mma count, the
# instructions a weight (one 4-bit tile = 8 weights a lane), and the opcode mix.
# Usage: hotloop.py FILE FUNCTION_SUBSTRING [MMA_PER_TILE]   (2: split-halves form, 1: pair form)
import re
import sys
from collections import Counter


def functions(text):
    """(name, lines) for each kernel in PTX or SASS text."""
    out, name, body = [], None, []
    for line in text.splitlines():
        m = re.match(r'\s*\.(?:visible\s+)?\.?entry\s+(\S+?)\(', line) or \
            re.match(r'\s*Function\s*:\s*(\S+)', line)
        if m:
            if name:
                out.append((name, body))
            name, body = m.group(1), []
        elif name:
            body.append(line)
    if name:
        out.append((name, body))
    return out


def parse(lines):
    """A list of ('label', name) and ('ins', opcode, target or None) items."""
    items = []
    for line in lines:
        s = re.sub(r'/\*.*?\*/', '', line).strip()  # SASS addresses and encodings
        s = re.sub(r'//.*', '', s).strip()
        if not s or s.startswith('.') and not re.match(r'\.L_x_\d+:', s):
            continue
        m = re.match(r'^([$.\w]+):$', s)
        if m:
            items.append(('label', m.group(1)))
            continue
        s = s.rstrip(';').strip()
        s = re.sub(r'^@!?[%\w.]+\s+', '', s)  # predicate guard
        if not s or s in ('{', '}'):
            continue
        op = s.split()[0]
        tgt = None
        if re.match(r'(bra|BRA)\b', op):
            m = re.search(r'`?\(?([$.\w]+)\)?`?\s*$', s)
            tgt = m.group(1) if m else None
        items.append(('ins', op, tgt))
    return items


def is_mma(op):
    return op.startswith('mma.') or op.startswith('HMMA')


def loops(items):
    """Innermost loops (label .. last backward branch to it) that contain mma. A loop nested in
    one of them without mma of its own (an input staging loop) is left out of its
    count: (start, ops, mma count, instructions left out)."""
    where = {it[1]: i for i, it in enumerate(items) if it[0] == 'label'}
    regions = []
    for i, it in enumerate(items):
        if it[0] == 'ins' and it[2] in where and where[it[2]] < i:
            regions.append((where[it[2]], i))
    # merge: the widest span per head
    span = {}
    for a, b in regions:
        span[a] = max(span.get(a, b), b)
    spans = sorted(span.items())

    def n_mma(a, b):
        return sum(it[0] == 'ins' and is_mma(it[1]) for it in items[a:b + 1])

    with_mma = [(a, b) for a, b in spans if n_mma(a, b)]
    inner = [(a, b) for a, b in with_mma
             if not any(a < c and d <= b for c, d in with_mma if (c, d) != (a, b))]
    out = []
    for a, b in inner:
        nested = [(c, d) for c, d in spans if a < c and d <= b]
        skip = set(i for c, d in nested for i in range(c, d + 1))
        ops = [it[1] for i, it in enumerate(items[a:b + 1], a) if it[0] == 'ins' and i not in skip]
        left = sum(1 for i in skip if items[i][0] == 'ins')
        out.append((a, ops, sum(is_mma(o) for o in ops), left))
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit('usage: hotloop.py FILE FUNCTION_SUBSTRING [MMA_PER_TILE]')
    text = open(sys.argv[1]).read()
    per_tile = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
    found = False
    for name, body in functions(text):
        if sys.argv[2] not in name:
            continue
        found = True
        print(f'{name}')
        for start, ops, n_mma, left in loops(parse(body)):
            tiles = n_mma / per_tile
            mix = Counter(o.split('.')[0] for o in ops).most_common(12)
            nested = f' (+{left} in loops nested without mma)' if left else ''
            print(f'  loop at item {start}: {len(ops)} instructions{nested}, {n_mma} mma, '
                  f'{tiles:.0f} tiles -> {len(ops) / tiles:.1f} a tile, '
                  f'{len(ops) / (tiles * 8):.2f} a weight')
            print('    ' + ', '.join(f'{o} {c}' for o, c in mix))
    if not found:
        sys.exit(f'hotloop.py: no function matching {sys.argv[2]}')


if __name__ == '__main__':
    main()
