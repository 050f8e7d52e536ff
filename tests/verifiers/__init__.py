"""Tests for switchboard.verifiers."""
