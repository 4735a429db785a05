#!/usr/bin/env python3
"""Every relative link in README.md and docs/*.md names a file that exists and, with #anchor,
a heading of that file (GitHub's anchor rules); the README stays a short front door (<= 250 lines)."""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
README_MAX_LINES = 250


def anchors(path):
    """GitHub's heading ids: lower case, punctuation dropped except '-' and '_', spaces to '-'."""
    out, seen = set(), {}
    in_code = False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip()
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def main():
    pages = [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    problems = []
    for page in pages:
        text = open(page, encoding="utf-8").read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)  # links inside code blocks are not links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
                continue
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), file_part)) if file_part else page
            where = os.path.relpath(page, ROOT)
            if not os.path.exists(dest):
                problems.append(f"{where}: link to {target}: no such file")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                problems.append(f"{where}: link to {target}: no heading with that anchor in {os.path.relpath(dest, ROOT)}")
    lines = sum(1 for _ in open(pages[0], encoding="utf-8"))
    if lines > README_MAX_LINES:
        problems.append(f"README.md: {lines} lines; keep it at most {README_MAX_LINES} and move details to docs/")
    for p in problems:
        print(p)
    print(f"{len(pages)} pages checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
