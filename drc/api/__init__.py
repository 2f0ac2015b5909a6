"""The pull API: subscribers and remote datacenters read the change stream by SCN over HTTP.

:mod:`drc.api.wire`, :mod:`drc.api.streamwire` and :mod:`drc.api.pullquery` (a pull's query) are
pure and are what clients import; the rest is the FastAPI server. This package's ``__init__``
imports nothing, so importing them never pulls in FastAPI.
"""
