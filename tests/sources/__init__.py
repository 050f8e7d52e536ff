"""Tests for switchboard.sources."""
