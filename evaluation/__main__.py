"""`python -m evaluation --kb NAME --questions FILE`: evaluate a base on its own questions."""

from evaluation.run import main

if __name__ == "__main__":
    raise SystemExit(main())
