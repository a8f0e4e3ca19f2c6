#!/usr/bin/env python3
"""No function of the library, the CLI or the Python binding is longer than 120 lines: a longer one does
several things, each of which wants a name (issue 44). Fails naming file:line and the length of each.

A function here is a brace block opened after a ')' (a function's or a lambda's head, NB_MODULE's) at
namespace or class scope; its lambdas and blocks count in it. Comments and string literals are blanked
first, so their braces do not count. Usage: function_length.py <source root> [limit]
"""
import os
import re
import sys

FOLDERS = ["core", "dtypes", "kernels", "memory", "backends", "init", "stacking", "shard", "plan", "checkpoint",
           "tools", "python/src"]
SUFFIXES = (".cpp", ".hpp", ".cu", ".cuh")


def blank(src: str) -> str:
    """Comments, raw strings, strings and characters as empty text, their newlines kept."""
    keep_lines = lambda m: "\n" * m.group(0).count("\n")
    src = re.sub(r'R"(\w*)\(.*?\)\1"', lambda m: '""' + keep_lines(m), src, flags=re.S)
    src = re.sub(r"/\*.*?\*/", keep_lines, src, flags=re.S)
    src = re.sub(r"//[^\n]*", "", src)
    src = re.sub(r'"(\\.|[^"\\\n])*"', '""', src)
    return re.sub(r"'(\\.|[^'\\\n])'", "''", src)


SCOPE = re.compile(r"\b(namespace|class|struct|enum|union)\b[^;(){}]*$")
FUNCTION = re.compile(r"\)\s*(const)?\s*(noexcept)?\s*(override|final)?\s*(->\s*[\w:<>,&*\s]+)?\s*$")


def long_functions(path: str, limit: int):
    lines = blank(open(path, encoding="utf-8", errors="replace").read()).split("\n")
    stack = []  # (kind, first line) of each open brace
    for i, line in enumerate(lines):
        for col, ch in enumerate(line):
            if ch == "{":
                head = " ".join(x.strip() for x in lines[max(0, i - 4):i]) + " " + line[:col]
                head = head.rsplit(";", 1)[-1].rsplit("}", 1)[-1].rsplit("{", 1)[-1].strip()
                kind = "scope" if SCOPE.search(head) else "function" if FUNCTION.search(head) else "block"
                stack.append((kind, i))
            elif ch == "}" and stack:
                kind, first = stack.pop()
                if kind == "function" and all(k == "scope" for k, _ in stack) and i - first + 1 > limit:
                    yield first + 1, i - first + 1


def main() -> int:
    root = sys.argv[1]
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 120
    found = []
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in sorted(files):
                if f.endswith(SUFFIXES):
                    path = os.path.join(dirpath, f)
                    found += [(os.path.relpath(path, root), line, n) for line, n in long_functions(path, limit)]
    for path, line, n in sorted(found):
        print(f"{path}:{line}: a function of {n} lines (at most {limit}): split it into steps with names")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
