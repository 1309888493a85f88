"""``python -m nlaverify.precision``: one check, or the depth figure."""

from nlaverify.precision.figure import main

raise SystemExit(main())
