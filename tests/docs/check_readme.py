"""The README's library example must be the [readme-example] region of examples/deep_mlp.cpp (two-space
indent removed), so the documented code is the tested code."""
import re
import sys

root = sys.argv[1]
example = open(f"{root}/examples/deep_mlp.cpp").read()
m = re.search(r"// \[readme-example\]\n(.*?)\n  // \[readme-example\]", example, re.S)
region = "\n".join(line[2:] if line.startswith("  ") else line for line in m.group(1).split("\n")) if m else ""
readme = open(f"{root}/README.md").read()
if not region or "```cpp\n" + region + "\n```" not in readme:
    sys.exit("README.md's library example differs from examples/deep_mlp.cpp's [readme-example] region")
