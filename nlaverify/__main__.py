"""``python -m nlaverify``: the ``nlaverify`` command."""

from nlaverify.cli import main

raise SystemExit(main())
