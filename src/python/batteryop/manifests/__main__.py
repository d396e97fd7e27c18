"""`python -m batteryop.manifests`: write install.yaml (see `batteryop.manifests.render.main`)."""

from batteryop.manifests.render import main

raise SystemExit(main())
