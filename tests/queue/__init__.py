"""Tests for switchboard.queue."""
