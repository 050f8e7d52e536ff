"""Tests for switchboard.web."""
