"""Start-up hook of every Python process started with this folder on ``PYTHONPATH`` in the fault
suite (the sweep and its workers): installs :mod:`faultinject` from the environment."""

import faultinject

faultinject.install_from_env()
