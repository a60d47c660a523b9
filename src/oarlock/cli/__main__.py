from oarlock.cli import main

raise SystemExit(main())
