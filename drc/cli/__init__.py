"""The ``drc`` command line: thin commands over the packages below."""
