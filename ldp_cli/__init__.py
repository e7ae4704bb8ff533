"""The ``ldp`` command line: a thin client of the library packages."""
