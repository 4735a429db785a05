"""Renders a `gputrain report` page in headless Chromium (Debian's chromium-headless-shell) and
reports what a reader would see: the DOM after the page's script ran (the charts' SVG paths, the
tables) for a given URL fragment, and a PNG screenshot's size and how many pixels carry each run's
colour.

usage: render_report.py REPORT_HTML FRAGMENT PNG OUTPUT
  FRAGMENT the view, e.g. "log=1" or "" ; OUTPUT a JSON object: paths [{chart, scale, run, key,
  points, values}], summary_rows, difference_keys, urls (every http(s) URL in the file), png {width,
  height, colors {hex: pixels}}. A path's values are its points read back as a reader would: each
  pixel position mapped to step and value through the chart's own axis, fitted to its tick lines and
  their labels (on a log axis, to the labels' logarithms).
"""
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import numpy
from PIL import Image

COLORS = ["#1f77b4", "#d62728", "#2ca02c"]


def chromium():
    for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    sys.exit("no headless Chromium found: run scripts/setup.sh (it installs chromium-headless-shell)")


def run_chromium(args, url):
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args, url]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout


class Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.paths, self.chart, self.scale, self.table = [], None, None, None
        self.rows = {}
        self.axes = {}  # chart -> {"y": [(pixel, label)], "x": [...]}
        self.lines, self.text_anchor = None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and "data-chart" in a:
            self.chart, self.scale = a["data-chart"], a["data-scale"]
            self.axes[self.chart] = {"y": [], "x": [], "hlines": [], "vlines": []}
        if tag == "line" and self.chart:
            if a["y1"] == a["y2"]:
                self.axes[self.chart]["hlines"].append(float(a["y1"]))
            else:
                self.axes[self.chart]["vlines"].append(float(a["x1"]))
        self.text_anchor = a.get("text-anchor") if tag == "text" and self.chart else None
        if tag == "path" and "data-key" in a:
            points = [(float(x), float(y)) for x, y in re.findall(r"[ML]([-\d.]+) ([-\d.]+)", a["d"])]
            self.paths.append({"chart": self.chart, "scale": self.scale, "run": int(a["data-run"]),
                               "key": a["data-key"], "points": int(a["data-points"]),
                               "moves": len(points), "pixels": points})
        if tag == "table":
            self.table = a.get("id")
        if tag == "tr" and self.table:
            self.rows.setdefault(self.table, []).append([])
        if tag == "td" and self.table:
            self.rows[self.table][-1].append("")

    def handle_endtag(self, tag):
        if tag == "table":
            self.table = None

    def handle_data(self, data):
        if self.text_anchor in ("end", "middle") and data.strip() not in ("", "step"):
            axis = self.axes[self.chart]["y" if self.text_anchor == "end" else "x"]
            axis.append(float(data.replace(",", "")))
            self.text_anchor = None
        if self.table in self.rows and self.rows[self.table] and self.rows[self.table][-1]:
            self.rows[self.table][-1][-1] += data


def axis_map(pixels, labels, log):
    """The linear map from pixel to value that the tick lines and their labels define."""
    values = numpy.log10(labels) if log else numpy.array(labels)
    slope, offset = numpy.polyfit(numpy.array(pixels), values, 1)
    return lambda p: (10 ** (slope * p + offset)) if log else slope * p + offset


def read_values(dom):
    for path in dom.paths:
        axes = dom.axes[path["chart"]]
        # Each tick is a grid line and a label, drawn in the same order; two of each fix an axis.
        pixels = path.pop("pixels")
        if not (len(axes["hlines"]) == len(axes["y"]) >= 2 and len(axes["vlines"]) == len(axes["x"]) >= 2):
            path["values"] = None
            continue
        to_y = axis_map(axes["hlines"], axes["y"], path["scale"] == "log")
        to_x = axis_map(axes["vlines"], axes["x"], False)
        path["values"] = [[to_x(px), to_y(py)] for px, py in pixels]


def main():
    html, fragment, png, dst = sys.argv[1:5]
    url = "file://" + html + ("#" + fragment if fragment else "")
    dom = Dom()
    dom.feed(run_chromium(["--virtual-time-budget=5000", "--dump-dom"], url))
    read_values(dom)
    run_chromium(["--window-size=1400,1500", "--screenshot=" + png], url)
    image = Image.open(png).convert("RGB")
    pixels = numpy.asarray(image).astype(int)
    counts = {}
    for c in COLORS:
        rgb = numpy.array([int(c[i:i + 2], 16) for i in (1, 3, 5)])
        counts[c] = int((numpy.abs(pixels - rgb).sum(axis=2) <= 30).sum())
    with open(html, encoding="utf-8") as f:
        urls = re.findall(r"https?://[^\s\"'<>)]+", f.read())
    rows = dom.rows
    out = {"paths": dom.paths,
           "summary_rows": [r for r in rows.get("summary", []) if r],
           "difference_keys": [r[0] for r in rows.get("differences-table", []) if r],
           "urls": sorted(set(urls)),
           "png": {"width": image.width, "height": image.height, "colors": counts}}
    with open(dst, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
