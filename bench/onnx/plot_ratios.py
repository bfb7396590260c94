#!/usr/bin/env python3
"""Bar chart (SVG) of cinfer / ONNX Runtime p50 ratios from saved bench_vs_ort.py output.

    bench/onnx/plot_ratios.py --out docs/plots/onnx-vs-ort.svg --title "..." \
        idle=run1.txt busy=run2.txt

Each LABEL=FILE is the stdout of one bench_vs_ort.py run; its markdown table gives one bar
per (model, threads, batch) cell: the ratio of medians (below 1.0: cinfer faster). A line
marks 1.0. No plotting library: the SVG is written by hand, as bench/sched's charts are.
"""
import argparse
import sys


def read_cells(path):
    cells = {}
    for line in open(path):
        f = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(f) < 6 or not f[1].isdigit() or not f[2].isdigit():
            continue
        try:
            cells[(f[0], int(f[1]), int(f[2]))] = float(f[5])
        except ValueError:
            continue
    if not cells:
        sys.exit(f"{path}: no bench_vs_ort.py table found")
    return cells


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="cinfer p50 / ONNX Runtime p50")
    ap.add_argument("runs", nargs="+", metavar="LABEL=FILE")
    a = ap.parse_args()
    series = []
    for r in a.runs:
        label, _, path = r.partition("=")
        if not path:
            sys.exit(f"{r}: expected LABEL=FILE")
        series.append((label, read_cells(path)))
    keys = list(series[0][1])
    for label, cells in series[1:]:
        keys += [k for k in cells if k not in keys]
    ymax = 0.2 * -(-max(1.2, max(v for _, c in series for v in c.values()) * 1.05) // 0.2)
    W, H, L, B, T = max(640, 34 * len(keys) + 140), 470, 50, 180, 40
    band = (W - L - 80) / len(keys)
    bw = band * 0.8 / len(series)
    py = lambda v: H - B - v / ymax * (H - B - T)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W:.0f}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W:.0f}" height="{H}" fill="white"/>',
           f'<text x="{W / 2:.0f}" y="16" text-anchor="middle" font-size="13">{a.title}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - 80:.0f}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="14" y="{(H - B) / 2 + T / 2:.0f}" transform="rotate(-90 14 {(H - B) / 2 + T / 2:.0f})" '
           f'text-anchor="middle">cinfer / ORT (p50)</text>']
    for i in range(int(round(ymax / 0.2)) + 1):
        v = 0.2 * i
        out.append(f'<line x1="{L}" y1="{py(v):.1f}" x2="{W - 80:.0f}" y2="{py(v):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{L - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    for j, k in enumerate(keys):
        x0 = L + j * band + band * 0.1
        for i, (label, cells) in enumerate(series):
            if k not in cells:
                continue
            v = cells[k]
            out.append(f'<rect x="{x0 + i * bw:.1f}" y="{py(v):.1f}" width="{bw:.1f}" height="{H - B - py(v):.1f}" '
                       f'fill="{colors[i % 4]}"><title>{label} {k[0]} T{k[1]} b{k[2]}: {v:.2f}</title></rect>')
        cx = L + (j + 0.5) * band
        out.append(f'<text x="{cx:.1f}" y="{H - B + 8}" transform="rotate(60 {cx:.1f} {H - B + 8})" '
                   f'font-size="9">{k[0]} T{k[1]} b{k[2]}</text>')
    out.append(f'<line x1="{L}" y1="{py(1.0):.1f}" x2="{W - 80:.0f}" y2="{py(1.0):.1f}" stroke="black" '
               f'stroke-dasharray="4 3"/>')
    for i, (label, _) in enumerate(series):
        out.append(f'<rect x="{W - 300:.0f}" y="{26 + 14 * i}" width="10" height="10" fill="{colors[i % 4]}"/>')
        out.append(f'<text x="{W - 285:.0f}" y="{35 + 14 * i}">{label}</text>')
    out.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"{a.out}: {len(keys)} cells, {len(series)} series")


if __name__ == "__main__":
    main()
