from benchmarks.papers.runner import main

raise SystemExit(main())
