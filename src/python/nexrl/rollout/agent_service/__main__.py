from nexrl.rollout.agent_service.cli import main

raise SystemExit(main())
