"""Tests for switchboard.notify."""
