from nexrl.training_service.cli import main

raise SystemExit(main())
