"""`ssetape mcp`: the store as a Model Context Protocol server for coding agents, read-only.

One module per noun (exchanges, stalls, findings, comparison), each turning what
:class:`ssetape.storage.queries.Queries` reads into bounded JSON documents; :mod:`.server`
registers them as tools on the official SDK. (Named ``mcp_server``: a package ``mcp`` here
would shadow the SDK.)
"""
