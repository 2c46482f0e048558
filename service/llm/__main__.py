"""`python -m service.llm check`: what each configured model does (service/llm/check.py)."""

from service.llm.check import main

if __name__ == "__main__":
    raise SystemExit(main())
