#!/usr/bin/env python3
"""No function in the C++ and CUDA sources is longer than the limit (docs/contributing.md).

Counts each function body from its opening brace's line to its closing brace's line, braces matched
after comments, string and character literals and preprocessor lines are blanked out. A body is a
brace at namespace or class scope whose declaration ends in `)` (with const, noexcept, override,
a trailing return type...); lambdas and local classes count toward the function holding them.

usage: check_function_length.py ROOT [LIMIT]   (LIMIT default 150)
"""
import pathlib
import re
import sys

DIRS = ("apps", "lib", "kernels", "tests", "bench")
SUFFIXES = {".cpp", ".h", ".cu", ".cuh"}
FUNCTION_HEAD = re.compile(r"\)\s*(?:const|noexcept|override|final|mutable|&|&&|\s|->\s*[\w:<>,\s\*&]+)*$")


def blank(text):
    """The text with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)

    def spaces(a, b):
        return re.sub(r"[^\n]", " ", text[a:b])

    while i < n:
        c = text[i]
        line_start = text.rfind("\n", 0, i) + 1
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
        elif c == "'" and i > 0 and text[i - 1].isalnum() and text[i + 1 : i + 2].isalnum():
            j = i + 1  # a digit separator: 5'000'000
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j += 1
        elif c == "#" and text[line_start:i].strip() == "":
            j = i
            while True:
                k = text.find("\n", j)
                k = n if k < 0 else k
                if k > 0 and text[k - 1] == "\\":
                    j = k + 1
                    continue
                break
            j = k
        else:
            out.append(c)
            i += 1
            continue
        out.append(spaces(i, j))
        i = j
    return "".join(out)


def functions(text):
    """(first line, line count, declaration) of every function body at namespace or class scope."""
    s = blank(text)
    stack, found, last = [], [], 0  # stack of (kind, offset, declaration)
    for m in re.finditer(r"[{};]", s):
        ch, at = m.group(), m.start()
        in_function = any(kind == "function" for kind, _, _ in stack)
        if ch == "{":
            head = s[last:at]
            kind = "other"
            if not in_function:
                if re.search(r"\b(namespace\b[\w:\s]*|extern\s+\"?\w*\"?\s*)$", head):
                    kind = "namespace"
                elif re.search(r"\b(class|struct|union)\b[^;()]*$", head) and not FUNCTION_HEAD.search(head):
                    kind = "class"
                elif FUNCTION_HEAD.search(head) and "=" not in head.split("(")[0]:
                    kind = "function"
            stack.append((kind, at, head))
        elif stack and ch == "}":
            kind, start, head = stack.pop()
            if kind == "function" and not any(k == "function" for k, _, _ in stack):
                first = s.count("\n", 0, start) + 1
                found.append((first, s.count("\n", 0, at) + 2 - first, " ".join(head.split())))
        last = at + 1
    return found


def main():
    root = pathlib.Path(sys.argv[1])
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    seen, long = 0, []
    for d in DIRS:
        for path in sorted((root / d).rglob("*")):
            if path.suffix not in SUFFIXES or "build" in path.relative_to(root).parts:
                continue
            for first, lines, head in functions(path.read_text(encoding="utf-8")):
                seen += 1
                if lines > limit:
                    long.append(f"{path.relative_to(root)}:{first}: {lines} lines: {head[-100:]}")
    if seen < 1000:
        sys.exit(f"found only {seen} functions under {', '.join(DIRS)}: the scan is broken")
    if long:
        print(f"functions longer than {limit} lines (split them; docs/contributing.md):")
        print("\n".join(long))
        sys.exit(1)
    print(f"{seen} functions, none longer than {limit} lines")


if __name__ == "__main__":
    main()
