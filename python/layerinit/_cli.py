"""The ``layerinit`` console script: runs the command-line tool the package carries (layerinit/bin/layerinit),
in place of this process, so its exit status, signals and output are the tool's own."""
import os
import sys
from pathlib import Path


def main() -> None:
    exe = Path(__file__).resolve().parent / "bin" / "layerinit"
    if not os.access(exe, os.X_OK):
        sys.exit(f"layerinit: this installation has no command-line tool at {exe} (reinstall the package)")
    os.execv(exe, ["layerinit", *sys.argv[1:]])


if __name__ == "__main__":
    main()
