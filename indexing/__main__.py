from indexing.cli import main

raise SystemExit(main())
