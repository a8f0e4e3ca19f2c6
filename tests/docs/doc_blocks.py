"""Every fenced code block of README.md and docs/*.md runs in a test, or says why not.

By language: ```python runs in a fresh interpreter (python/tests/test_docs.py, pytest); ```sh, ```bash and
```console run under bash -e in a temporary directory with the built CLI first on PATH; ```cpp blocks are
compiled together into one program (`cpp` below writes it; tests/CMakeLists.txt builds it against the
installed headers' view and liblayerinit) and each runs in its own directory; ```json is parsed. A block of
any other language, or none, must be marked skip. Markers are HTML comments on the lines just above the
fence (invisible on GitHub):

  <!-- test: skip REASON -->        not run (an output sample, a diagram, needs MPI...); the reason is printed
  <!-- test: replace OLD => NEW --> run with OLD replaced (huge models at small sizes); must match
  <!-- test: setup COMMAND -->      a shell command run first in the block's directory (the files it reads;
                                    $LAYERINIT_SOURCE_DIR is the repository)
  <!-- test: spec -->              a json block that is a model spec: also given to `layerinit plan --spec`
  <!-- test: output COMMAND -->    the block is COMMAND's standard output, exactly (a "real output" sample)
  <!-- FILE [docs:REGION] -->       (python) the block is that region of a tested file, verbatim

A cpp block is a fragment: its #include and `using namespace` lines go to the top of the program, which
also includes <layerinit/layerinit.hpp>, <cstdio> and `using namespace layerinit`; the rest is the body of
a function of its own. Running this file checks and runs every non-Python block (the ctest):
  doc_blocks.py check ROOT CLI CPP_PROGRAM
and `doc_blocks.py cpp ROOT OUT.cpp` writes the C++ program."""
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SHELL = {"sh", "bash", "console"}
FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!-- test: (skip|replace|setup|spec|output)\b ?(.*?) -->$")
REGION = re.compile(r"^<!-- (\S+) \[docs:(\w+)\] -->$")


@dataclass
class Block:
    doc: str  # "docs/spec.md"
    line: int  # of the opening fence, 1-based
    lang: str
    code: str  # as written
    skip: str = ""
    replace: list = field(default_factory=list)  # [(old, new)]
    setup: list = field(default_factory=list)
    spec: bool = False
    output: str = ""  # the command whose stdout the block is
    region: tuple = ()  # (path, region)

    @property
    def where(self):
        return f"{self.doc}:{self.line}"

    def runnable_code(self):
        """The code with the replacements applied; each must match, so a stale marker fails."""
        code = self.code
        for old, new in self.replace:
            if old not in code:
                raise ValueError(f"{self.where}: replace '{old}' matches nothing in the block")
            code = code.replace(old, new)
        return code


def doc_files(root):
    root = Path(root)
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


def blocks(root):
    """The fenced blocks of every documentation file, in order, with their markers. A fence must start its
    line (no indented fences: a list item's block would be missed); every opened fence must close."""
    root = Path(root)
    out = []
    for path in doc_files(root):
        lines = path.read_text().split("\n")
        rel = str(path.relative_to(root))
        i = 0
        while i < len(lines):
            if lines[i].lstrip().startswith("```") and not lines[i].startswith("```"):
                raise ValueError(f"{rel}:{i + 1}: an indented fence: start code blocks at column 0")
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            if end is None or lines[end].strip() != "```":
                raise ValueError(f"{rel}:{i + 1}: the block is not closed by a plain ```")
            b = Block(rel, i + 1, m.group(1), "\n".join(lines[i + 1:end]) + "\n")
            k = i - 1
            while k >= 0 and lines[k].startswith("<!-- "):
                mm, rm = MARKER.match(lines[k]), REGION.match(lines[k])
                if rm:
                    b.region = (rm.group(1), rm.group(2))
                elif not mm:
                    raise ValueError(f"{rel}:{k + 1}: not a test marker: {lines[k]}")
                elif mm.group(1) == "skip":
                    b.skip = mm.group(2) or "(no reason given)"
                elif mm.group(1) == "replace":
                    old, sep, new = mm.group(2).partition(" => ")
                    if not sep:
                        raise ValueError(f"{rel}:{k + 1}: replace needs OLD => NEW")
                    b.replace.insert(0, (old, new))
                elif mm.group(1) == "output":
                    b.output = mm.group(2)
                elif mm.group(1) == "setup":
                    b.setup.insert(0, mm.group(2))
                else:
                    b.spec = True
                k -= 1
            out.append(b)
            i = end + 1
    return out


def runner(b):
    """Which test runs the block: 'python', 'shell', 'cpp', 'json', or None (marked skip, or nothing runs it)."""
    if b.skip:
        return None
    if b.output:
        return "output"
    if b.lang == "python":
        return "python"
    if b.lang in SHELL:
        return "shell"
    if b.lang in ("cpp", "json"):
        return b.lang
    return None


def cpp_program(root):
    """One translation unit: every cpp block a function in its own namespace; main(i) runs block i."""
    cpp = [b for b in blocks(root) if runner(b) == "cpp"]
    head = ["#include <cstdio>", "#include <cstdlib>", "#include <exception>", "#include <layerinit/layerinit.hpp>"]
    bodies = []
    for n, b in enumerate(cpp):
        body = []
        for line in b.runnable_code().split("\n"):
            hoisted = line.startswith("#include") or line.startswith("using namespace")
            if line.startswith("#include"):
                head.append(line)
            body.append("" if hoisted else line)  # blank: the #line numbers stay the doc's
        bodies.append(f"namespace block{n} {{\nusing namespace layerinit;\n// {b.where}\nvoid run() {{\n"
                      f'#line {b.line + 1} "{b.doc}"\n' + "\n".join(body) + "\n}\n}\n")
    table = ", ".join(f"block{n}::run" for n in range(len(cpp)))
    main = ("int main(int argc, char** argv) {\n"
            f"  void (*const blocks[])() = {{{table}}};\n"
            f"  if (argc != 2) {{ std::printf(\"%d\\n\", {len(cpp)}); return 0; }}\n"
            "  try { blocks[std::atoi(argv[1])](); } catch (const std::exception& e) {\n"
            '    std::fprintf(stderr, "%s\\n", e.what()); return 1; }\n'
            "  return 0;\n}\n")
    return "\n".join(dict.fromkeys(head)) + "\n\n" + "\n".join(bodies) + "\n" + main


def run_in(tmp, b, cli_dir, cmd, stdin=None, timeout=120):
    env = dict(os.environ, PATH=f"{cli_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               LAYERINIT_SOURCE_DIR=str(Path(__file__).resolve().parents[2]))
    for s in b.setup:
        r = subprocess.run(["bash", "-ec", s], cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
        if r.returncode:
            return r
    return subprocess.run(cmd, cwd=tmp, env=env, input=stdin, capture_output=True, text=True, timeout=timeout)


def python_with(modules):
    """A Python that imports `modules` for a shell block's `python`: $LAYERINIT_HF_PYTHON, the repository's
    .venv-python (scripts/python-test-env), .venv (scripts/python-env), python3; None when none does."""
    root = Path(__file__).resolve().parents[2]
    for py in (os.environ.get("LAYERINIT_HF_PYTHON"), root / ".venv-python/bin/python", root / ".venv/bin/python",
               shutil.which("python3")):
        if py and Path(py).exists() and subprocess.run([str(py), "-c", f"import {', '.join(modules)}"],
                                                       capture_output=True).returncode == 0:
            return str(py)
    return None


def check(root, cli, cpp_program_path):
    """Runs every shell, cpp and json block; lists each block with what happened. Exit 1 on any failure."""
    root = Path(root)
    cli, cpp_program_path = str(Path(cli).resolve()), str(Path(cpp_program_path).resolve())
    cli_dir = str(Path(cli).parent)
    all_blocks = blocks(root)
    fences = sum(1 for p in doc_files(root) for line in p.read_text().split("\n") if line.startswith("```"))
    failures = []
    if fences != 2 * len(all_blocks):
        failures.append(f"{fences} fence lines but {len(all_blocks)} blocks were read")
    cpp_index = 0
    counts = {}
    for b in all_blocks:
        kind = runner(b)
        t0 = time.monotonic()
        status = ""
        with tempfile.TemporaryDirectory(prefix="doc-block-") as tmp:
            try:
                if b.skip:
                    status = f"skipped: {b.skip}"
                elif kind is None:
                    status = f"FAILED: a ```{b.lang} block runs in no test: mark it <!-- test: skip REASON -->"
                elif kind == "python":
                    status = "python/tests/test_docs.py runs it"
                elif kind == "output":
                    r = run_in(tmp, b, cli_dir, ["bash", "-ec", b.output])
                    if r.returncode:
                        status = f"FAILED: {b.output}: exit {r.returncode}\n{r.stderr[-2000:]}"
                    elif r.stdout != b.code:
                        diff = difflib.unified_diff(b.code.split("\n"), r.stdout.split("\n"), "the block", b.output, lineterm="")
                        status = f"FAILED: the block is not what {b.output} prints:\n" + "\n".join(list(diff)[:40])
                    else:
                        status = f"is what {b.output} prints"
                elif kind == "json":
                    json.loads(b.runnable_code())
                    status = "parsed"
                    if b.spec:
                        Path(tmp, "spec.json").write_text(b.runnable_code())
                        r = run_in(tmp, b, cli_dir, [cli, "plan", "--spec", "spec.json"])
                        status = "parsed, layerinit plan --spec took it" if r.returncode == 0 else (
                            f"FAILED: layerinit plan --spec: exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
                elif kind == "cpp":
                    r = run_in(tmp, b, cli_dir, [cpp_program_path, str(cpp_index)])
                    cpp_index += 1
                    status = "compiled, ran" if r.returncode == 0 else (
                        f"FAILED: exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
                else:
                    code = b.runnable_code()
                    if re.search(r"^python\b", code, re.M):
                        py = python_with(["safetensors", "torch"])
                        if not py:
                            status = "FAILED: no Python with safetensors and torch for its `python` (scripts/python-test-env)"
                            raise StopIteration
                        Path(tmp, "bin").mkdir()
                        wrapper = Path(tmp, "bin", "python")  # not a symlink: a venv's python finds its venv by its path
                        wrapper.write_text(f'#!/bin/sh\nexec "{py}" "$@"\n')
                        wrapper.chmod(0o755)
                        code = f'PATH="{tmp}/bin:$PATH"\n' + code
                    if b.lang == "console":  # $ commands; the other lines are their output
                        code = "\n".join(line[2:] for line in code.split("\n") if line.startswith("$ ")) + "\n"
                    r = run_in(tmp, b, cli_dir, ["bash", "-e"], stdin=code)
                    status = "ran" if r.returncode == 0 else (
                        f"FAILED: exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
            except StopIteration:
                pass
            except (ValueError, subprocess.TimeoutExpired) as e:
                status = f"FAILED: {e}"
        if status.startswith("FAILED"):
            failures.append(f"{b.where} ```{b.lang}: {status}\n{b.runnable_code()}")
        key = "failed" if status.startswith("FAILED") else "skipped" if b.skip else "python" if kind == "python" else "checked"
        counts.setdefault(b.doc, {}).setdefault(key, 0)
        counts[b.doc][key] += 1
        print(f"{b.where:24} {b.lang or '(none)':8} {time.monotonic() - t0:5.1f} s  {status.split(chr(10))[0]}")
    n_cpp = int(subprocess.run([cpp_program_path], capture_output=True, text=True).stdout)
    if n_cpp != cpp_index:
        failures.append(f"the C++ program has {n_cpp} blocks, the docs {cpp_index}: rebuild it")
    print("\nper file: " + "; ".join(f"{d} " + ", ".join(f"{v} {k}" for k, v in c.items()) for d, c in counts.items()))
    for f in failures:
        print(f"\n{f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "cpp":
        text = cpp_program(sys.argv[2])
        out = Path(sys.argv[3])
        if not out.exists() or out.read_text() != text:  # unchanged docs: no recompile
            out.write_text(text)
    elif len(sys.argv) == 5 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4]))
    else:
        sys.exit(__doc__)
