"""The pull API: subscribers and remote datacenters read the change stream by SCN over HTTP.

:mod:`drc.api.wire` is pure and is what clients import; the rest is the FastAPI server.
This package's ``__init__`` imports nothing, so importing the wire module never pulls in FastAPI.
"""
