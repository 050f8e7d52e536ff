"""Tests for switchboard.mcp_server."""
