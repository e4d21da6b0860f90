from nexrl.agent_service.cli import main

raise SystemExit(main())
