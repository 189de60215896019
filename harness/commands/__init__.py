"""One module per CLI verb (see :mod:`harness.cli`)."""
