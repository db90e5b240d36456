"""A log–log figure as SVG with the standard library only (CI and this machine have no
matplotlib): per optimizer its points joined by a line, each with a vertical bar, in the
optimizer's colour of every figure the project draws; reference lines dashed grey; the legend
to the right of the axes."""
import json
import math
import os

STYLES_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "figures", "styles.json")


def _palette():
    """The colour of each optimizer as the project's figures draw it: the host's style table
    (host/src/report/style.rs), as its test writes it to docs/figures/styles.json."""
    with open(STYLES_JSON) as f:
        return {name: style["colour"] for name, style in json.load(f).items()}


COLOURS = _palette()


WIDTH, HEIGHT = 900, 560
LEFT, RIGHT, TOP, BOTTOM = 90, 230, 60, 70


def colours(names):
    """Each name's colour: its own, or for a variant outside the table (a name that extends a
    listed one with "-...") its base rule's, as the host draws it; grey for any other."""
    def colour(name):
        bases = [n for n in COLOURS if name == n or name.startswith(n + "-")]
        return COLOURS[max(bases, key=len)] if bases else "#7f7f7f"
    return {n: colour(n) for n in names}


def _ticks(low, high):
    """Powers of ten, with 2 and 5 between them when the range spans under two decades."""
    a, b = math.floor(math.log10(low)), math.ceil(math.log10(high))
    steps = (1, 2, 5) if b - a <= 2 else (1,)
    return [m * 10**e for e in range(a, b + 1) for m in steps if low <= m * 10**e <= high]


def loglog(path, title, xlabel, ylabel, series, references=(), note="", xticks=None):
    """`series`: {name: [(x, y, y_low, y_high)]} with positive x and y (a bar's non-positive
    end is drawn at the axis' bottom); `references`: [(label, [(x, y)])]; `note`: a line of
    text under the title saying what the bars are; `xticks`: the x axis' ticks (default:
    powers of ten, with 2 and 5 between them over a short range)."""
    xs = [p[0] for pts in series.values() for p in pts] + [p[0] for _, pts in references for p in pts]
    ys = [v for pts in series.values() for p in pts for v in p[1:] if v > 0]
    ys += [p[1] for _, pts in references for p in pts]
    if not xs or not ys:
        raise ValueError(f"{path}: nothing to draw")
    x0, x1 = math.log10(min(xs)) - 0.05, math.log10(max(xs)) + 0.05
    y0, y1 = math.log10(min(ys)) - 0.1, math.log10(max(ys)) + 0.1
    w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    px = lambda x: LEFT + (math.log10(x) - x0) / (x1 - x0) * w
    py = lambda y: TOP + h - (math.log10(max(y, 10**y0)) - y0) / (y1 - y0) * h
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'font-family="DejaVu Sans, sans-serif" font-size="14">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="24" text-anchor="middle" font-size="18">{title}</text>',
           f'<text x="{WIDTH / 2}" y="44" text-anchor="middle" font-size="13" fill="#444">{note}</text>',
           f'<rect x="{LEFT}" y="{TOP}" width="{w}" height="{h}" fill="none" stroke="black"/>']
    for t in xticks or _ticks(10**x0, 10**x1):
        out.append(f'<line x1="{px(t):.1f}" y1="{TOP + h}" x2="{px(t):.1f}" y2="{TOP + h + 5}" stroke="black"/>')
        out.append(f'<text x="{px(t):.1f}" y="{TOP + h + 20}" text-anchor="middle">{t:g}</text>')
    for t in _ticks(10**y0, 10**y1):
        out.append(f'<line x1="{LEFT - 5}" y1="{py(t):.1f}" x2="{LEFT + w}" y2="{py(t):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 8}" y="{py(t) + 5:.1f}" text-anchor="end">{t:g}</text>')
    out.append(f'<text x="{LEFT + w / 2}" y="{HEIGHT - 20}" text-anchor="middle">{xlabel}</text>')
    out.append(f'<text transform="translate(22,{TOP + h / 2}) rotate(-90)" text-anchor="middle">{ylabel}</text>')
    legend = []
    palette = colours(series)
    for label, pts in references:
        d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{d}" fill="none" stroke="#888" stroke-dasharray="6,4"/>')
        legend.append((label, "#888", True))
    for name, pts in series.items():
        c = palette[name]
        pts = sorted(p for p in pts if p[1] > 0)
        d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _, _ in pts)
        out.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y, lo, hi in pts:
            out.append(f'<line x1="{px(x):.1f}" y1="{py(lo):.1f}" x2="{px(x):.1f}" y2="{py(hi):.1f}" stroke="{c}"/>')
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{c}"/>')
        legend.append((name, c, False))
    for i, (label, c, dashed) in enumerate(legend):
        y = TOP + 10 + 24 * i
        dash = ' stroke-dasharray="6,4"' if dashed else ""
        out.append(f'<line x1="{LEFT + w + 15}" y1="{y}" x2="{LEFT + w + 45}" y2="{y}" stroke="{c}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{LEFT + w + 52}" y="{y + 5}">{label}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
