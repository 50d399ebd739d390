#!/usr/bin/python3
"""The MoE study's headline plot (bench/results/sim.md, DeepSeek-V4.1-Flash) as SVG.

Reads the markdown of bench/sim/run_moe_study.sh (each table follows the
`ced-sim ...` command that made it) and draws the best split's capacity per
input:output ratio for CED (replay on prefill, on decode) and decoder-only.
Plain SVG, no plotting library needed.

Usage: /usr/bin/python3 bench/sim/plot_moe_study.py STUDY.md [OUT.svg]
       (default OUT: bench/results/plots/moe_capacity.svg)
"""
import re
import sys

RATIOS = ["1024:1024", "4096:256", "8192:128", "32768:64"]
SERIES = [("CED, replay on prefill", "--ced-replay-on prefill", "#1f77b4"),
          ("CED, replay on decode", "--ced-replay-on decode", "#2ca02c"),
          ("decoder-only", "--ced-encoder-layers 40", "#7f7f7f")]


def best_rates(text):
    """{(ratio, mode flags): best rate} for the 8-GPU prefill instance runs."""
    out, cmd = {}, None
    for line in text.splitlines():
        m = re.match(r"^`ced-sim (.*)`\s*$", line)
        if m:
            cmd = m.group(1)
            continue
        if cmd and line.startswith("| **") and "--prefill-gpus 8" in cmd:
            cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
            r = re.search(r"--input-mean (\d+) --output-mean (\d+)", cmd)
            for _, flags, _ in SERIES:
                if cmd.endswith(flags):
                    out[(f"{r.group(1)}:{r.group(2)}", flags)] = float(cells[1])
    return out


def svg(rates):
    w, h, left, bottom, top = 720, 360, 60, 50, 40
    vmax = max(rates.values()) * 1.15
    group = (w - left - 20) / len(RATIOS)
    bar = group / (len(SERIES) + 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             'font-family="sans-serif" font-size="12">',
             f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">DeepSeek-V4.1-Flash '
             'shape, six 8x H200 instances (fp8): best split capacity (req/s)</text>']
    y0 = h - bottom
    scale = (y0 - top) / vmax
    for t in range(0, int(vmax) + 1, 50):
        y = y0 - t * scale
        parts.append(f'<line x1="{left}" x2="{w - 20}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{t}</text>')
    for gi, ratio in enumerate(RATIOS):
        x0 = left + gi * group + bar / 2
        for si, (_, flags, color) in enumerate(SERIES):
            v = rates.get((ratio, flags))
            if v is None:
                continue
            x = x0 + si * bar
            parts.append(f'<rect x="{x:.1f}" y="{y0 - v * scale:.1f}" width="{bar * 0.9:.1f}" '
                         f'height="{v * scale:.1f}" fill="{color}"/>')
            parts.append(f'<text x="{x + bar * 0.45:.1f}" y="{y0 - v * scale - 4:.1f}" '
                         f'text-anchor="middle" font-size="10">{v:.0f}</text>')
        parts.append(f'<text x="{left + gi * group + group / 2:.1f}" y="{y0 + 18}" '
                     f'text-anchor="middle">{ratio}</text>')
    for si, (name, _, color) in enumerate(SERIES):
        x = left + 10 + si * 200
        parts.append(f'<rect x="{x}" y="{h - 22}" width="12" height="12" fill="{color}"/>')
        parts.append(f'<text x="{x + 16}" y="{h - 12}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[2] if len(sys.argv) > 2 else "bench/results/plots/moe_capacity.svg"
    rates = best_rates(open(sys.argv[1]).read())
    if not rates:
        sys.exit("plot_moe_study.py: no capacity tables found")
    with open(out, "w") as f:
        f.write(svg(rates))
    print(f"wrote {out} ({len(rates)} bars)")


if __name__ == "__main__":
    main()
