"""`python -m retrieval.evaluate` moved to `python -m evaluation` (the same arguments) when the
evaluation became a package of its own. Users' scripts still call the old name: this alias says
where it went and runs it, in a process of its own (retrieval/ may not import evaluation/)."""

import os
import sys

MOVED = "python -m retrieval.evaluate moved to python -m evaluation (the same arguments); running that"


def main() -> None:
    print(MOVED, file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "evaluation", *sys.argv[1:]])


if __name__ == "__main__":
    main()
