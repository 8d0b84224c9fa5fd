from rlkit.cli.main import main

raise SystemExit(main())
