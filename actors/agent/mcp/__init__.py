"""parlour.actors.agent.mcp: MCP servers as an agent's tools (the ``parlour[mcp]`` extra).

    from parlour.actors.agent.mcp import MCPServerHTTP, MCPServerStdio

    agent = Agent(client, toolsets=[
        MCPServerStdio("python", ["server.py"], env={"TOKEN": "..."}),
        MCPServerHTTP("http://127.0.0.1:8000/mcp", headers={"Authorization": "Bearer ..."}),
    ])

Imported only by an application that uses it: ``parlour.actors`` never imports it, so it
works without the extra.
"""

from ._server import MCPServer, MCPServerError, MCPServerHTTP, MCPServerStdio

__all__ = ["MCPServer", "MCPServerError", "MCPServerHTTP", "MCPServerStdio"]
