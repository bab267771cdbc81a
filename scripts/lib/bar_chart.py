#!/usr/bin/env python3
"""Draws a grouped horizontal bar chart as SVG (no plotting library needed).

Input on stdin, one bar group per line: `label|value1|value2|...`; the first line names the
series: `title|series1|series2|...`. Writes the SVG to the path given as the one argument.
Used for the figures of docs/performance.md (the command is beside each chart there).
"""
import sys
from html import escape

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"]

lines = [l.rstrip("\n") for l in sys.stdin if l.strip()]
title, *series = lines[0].split("|")
groups = [(l.split("|")[0], [float(v) for v in l.split("|")[1:]]) for l in lines[1:]]
vmax = max(v for _, vs in groups for v in vs) * 1.15 or 1
LEFT, WIDTH, BAR, GAP, TOP = 260, 760, 14, 12, 56
plot = WIDTH - LEFT - 20
height = TOP + len(groups) * (BAR * len(series) + GAP) + 40
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="12">',
       '<rect width="100%" height="100%" fill="white"/>',
       f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>']
for i, name in enumerate(series):
    x = LEFT + i * 200
    out.append(f'<rect x="{x}" y="32" width="12" height="12" fill="{COLOURS[i % len(COLOURS)]}"/>')
    out.append(f'<text x="{x + 16}" y="42">{escape(name)}</text>')
y = TOP
for label, values in groups:
    mid = y + BAR * len(values) / 2 + 4
    out.append(f'<text x="{LEFT - 8}" y="{mid:.1f}" text-anchor="end">{escape(label)}</text>')
    for i, v in enumerate(values):
        w = v / vmax * plot
        out.append(f'<rect x="{LEFT}" y="{y}" width="{w:.1f}" height="{BAR - 2}" fill="{COLOURS[i % len(COLOURS)]}"/>')
        out.append(f'<text x="{LEFT + w + 4:.1f}" y="{y + BAR - 4}">{v:g}</text>')
        y += BAR
    y += GAP
out.append(f'<line x1="{LEFT}" y1="{TOP - 4}" x2="{LEFT}" y2="{y}" stroke="black"/>')
out.append("</svg>")
open(sys.argv[1], "w").write("\n".join(out) + "\n")
