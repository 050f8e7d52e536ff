"""Tests for switchboard.intake."""
